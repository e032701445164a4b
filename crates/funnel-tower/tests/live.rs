//! Replacing a layer's policy set while requests flow (`RateLimitLayer::reconfigure`), over a
//! real server and client, with a frozen manual clock so admissions are exact.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use funnel::clock::ManualClock;
use funnel::Quota;
use funnel_testkit::tower::{client_from, draft_fields, get, member, request, send, serve};
use funnel_tower::{Builder, KeyBy, RateLimitLayer};
use http::StatusCode;

fn ip() -> KeyBy {
    KeyBy::PeerIp { v6_prefix: 64 }
}

/// 50 units, one back every 72 s (the clock is frozen: none come back).
fn fifty() -> Quota {
    Quota::per_hour(50).unwrap()
}

/// The two sets the writer alternates between: the ip policy alone, or behind a global cap
/// that never binds.
fn set(with_global: bool) -> Builder {
    let b = RateLimitLayer::builder();
    let b = if with_global {
        b.policy_with_capacity(
            "global",
            KeyBy::Global,
            Quota::per_hour(1_000_000).unwrap(),
            16,
        )
    } else {
        b
    };
    b.policy("ip", ip(), fifty())
}

/// Four clients on two addresses send 240 requests while a writer replaces the policy set
/// as fast as it can (yielding between replacements). The ip policy keeps its table through every replacement, so each address
/// is admitted exactly its 50 units; every response is whole (both fields name the policies
/// of one set); the counters carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_policy_keeps_every_keys_debt_while_the_set_is_replaced_under_load() {
    let layer = set(false)
        .build_with_clock(ManualClock::new())
        .expect("a valid set");
    let addr = serve(layer.clone()).await;

    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (layer, done) = (layer.clone(), done.clone());
        tokio::spawn(async move {
            let mut replacements = 0u32;
            // Relaxed: a stop flag; the clients' results travel through their join handles.
            while !done.load(Ordering::Relaxed) {
                layer
                    .reconfigure(set(replacements % 2 == 0))
                    .expect("a valid set");
                replacements += 1;
                tokio::task::yield_now().await;
            }
            replacements
        })
    };
    let mut clients = Vec::new();
    for from in ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"] {
        clients.push(tokio::spawn(async move {
            let client = client_from(Some(from.parse().unwrap()));
            let (mut ok, mut with_global) = (0, 0);
            for _ in 0..60 {
                let r = send(&client, request(addr, "/", &[])).await;
                let (policy, _) = draft_fields(&r);
                with_global += usize::from(policy.len() == 2);
                match r.status {
                    StatusCode::OK => ok += 1,
                    StatusCode::TOO_MANY_REQUESTS => {}
                    s => panic!("status {s}"),
                }
            }
            (from, ok, with_global)
        }));
    }
    let mut admitted = BTreeMap::new();
    let mut under_both_sets = 0;
    for c in clients {
        let (from, ok, with_global) = c.await.unwrap();
        *admitted.entry(from).or_insert(0) += ok;
        under_both_sets += usize::from(with_global > 0 && with_global < 60);
    }
    done.store(true, Ordering::Relaxed);
    let replacements = writer.await.unwrap();
    assert!(replacements >= 10, "only {replacements} replacements");
    assert!(under_both_sets > 0, "no client saw both sets");
    assert_eq!(admitted.values().copied().collect::<Vec<_>>(), [50, 50]);
    let stats = layer.stats("ip").unwrap();
    assert_eq!((stats.allowed, stats.denied), (100, 140));
}

/// A new quota reads the kept debt as time: 50 units of 72 s are 3,600 s of debt; under a
/// limit of 80 at the same rate (5,760 s) that leaves 30 units. A renamed policy, or one whose
/// table capacity changed, starts empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_quota_reads_the_kept_debt_and_a_new_name_starts_afresh() {
    let layer = set(false).build_with_clock(ManualClock::new()).unwrap();
    let addr = serve(layer.clone()).await;
    let admitted = |n: usize| async move {
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(get(addr, "/", &[]).await.status == StatusCode::OK);
        }
        ok
    };
    assert_eq!(admitted(60).await, 50);
    layer
        .reconfigure(RateLimitLayer::builder().policy("ip", ip(), fifty().with_limit(80).unwrap()))
        .unwrap();
    assert_eq!(admitted(40).await, 30);
    let r = get(addr, "/", &[]).await;
    assert_eq!(member(&draft_fields(&r).0, "ip").get("q"), 80);

    layer
        .reconfigure(RateLimitLayer::builder().policy("ip-v2", ip(), fifty()))
        .unwrap();
    assert_eq!(layer.policy_names(), ["ip-v2"]);
    assert!(layer.stats("ip").is_none());
    assert_eq!(admitted(60).await, 50);
    layer
        .reconfigure(RateLimitLayer::builder().policy_with_capacity("ip-v2", ip(), fifty(), 1024))
        .unwrap();
    assert_eq!(admitted(60).await, 50);
    assert_eq!(layer.stats("ip-v2").unwrap().allowed, 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_replacement_is_an_error_and_the_current_set_stays() {
    let layer = set(true).build_with_clock(ManualClock::new()).unwrap();
    let err = layer
        .reconfigure(RateLimitLayer::builder().policy("a\"b", KeyBy::Global, fifty()))
        .unwrap_err();
    assert!(matches!(err, funnel_tower::Error::BadName(_)));
    assert!(matches!(
        layer.reconfigure(RateLimitLayer::builder()),
        Err(funnel_tower::Error::NoPolicy)
    ));
    assert_eq!(layer.policy_names(), ["global", "ip"]);
    let addr = serve(layer).await;
    let (policy, _) = draft_fields(&get(addr, "/", &[]).await);
    assert_eq!(policy.len(), 2);
}
