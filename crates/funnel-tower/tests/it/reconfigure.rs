//! Replacing a layer's policy set while requests flow (`RateLimitLayer::reconfigure`), over a
//! real server and client, with a frozen manual clock so admissions are exact.

use std::collections::BTreeMap;

use crate::common::{client_from, draft_fields, get, member, request, send, serve};
use funnel::clock::ManualClock;
use funnel::Quota;
use funnel_tower::{Builder, KeyBy, RateLimitLayer};
use http::StatusCode;
use tokio::sync::watch;

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

/// Requests each client sends under one set before the writer may replace it: the first
/// `PINNED` of them start after the set is in place and end before the next one is, the
/// rest race with the replacement.
const WINDOW: usize = 6;
const PINNED: usize = 4;
const REQUESTS: usize = 60;

/// Four clients on two addresses send 240 requests while a writer replaces the policy set
/// nine times, every replacement racing with requests in flight. The clients and the writer
/// step together (a client's request `n` waits for set `n / WINDOW`; the writer installs set
/// `g + 1` once every client has finished `g * WINDOW + PINNED` requests), so every client
/// sees both sets whatever the scheduler does. The ip policy keeps its table through every
/// replacement, so each address is admitted exactly its 50 units; every response is whole
/// (both fields name the policies of one set); the counters carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_policy_keeps_every_keys_debt_while_the_set_is_replaced_under_load() {
    let layer = set(false)
        .build_with_clock(ManualClock::new())
        .expect("a valid set");
    let addr = serve(layer.clone()).await;

    let generations = REQUESTS / WINDOW;
    let (installed, _) = watch::channel(0usize);
    let mut progress = Vec::new();
    let mut clients = Vec::new();
    for from in ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"] {
        let (done, seen) = watch::channel(0usize);
        progress.push(seen);
        let mut installed = installed.subscribe();
        clients.push(tokio::spawn(async move {
            let client = client_from(Some(from.parse().unwrap()));
            let (mut ok, mut with_global) = (0, 0);
            for n in 0..REQUESTS {
                installed
                    .wait_for(|&g| g >= n / WINDOW)
                    .await
                    .expect("the writer outlives the clients");
                let r = send(&client, request(addr, "/", &[])).await;
                let (policy, _) = draft_fields(&r);
                let global = policy.len() == 2;
                if n % WINDOW < PINNED {
                    let expected = (n / WINDOW) % 2 == 1;
                    assert_eq!(global, expected, "request {n} from {from}: {policy:?}");
                }
                with_global += usize::from(global);
                match r.status {
                    StatusCode::OK => ok += 1,
                    StatusCode::TOO_MANY_REQUESTS => {}
                    s => panic!("status {s}"),
                }
                done.send_replace(n + 1);
            }
            (from, ok, with_global)
        }));
    }
    // Set g carries the global cap when g is odd; set 0 is the one the layer was built with.
    for g in 1..generations {
        for seen in &mut progress {
            seen.wait_for(|&finished| finished >= (g - 1) * WINDOW + PINNED)
                .await
                .expect("a client stopped early");
        }
        layer.reconfigure(set(g % 2 == 1)).expect("a valid set");
        installed.send_replace(g);
    }
    let mut admitted = BTreeMap::new();
    for c in clients {
        let (from, ok, with_global) = c.await.unwrap();
        *admitted.entry(from).or_insert(0) += ok;
        assert!(
            with_global > 0 && with_global < REQUESTS,
            "{from} saw one set only ({with_global} of {REQUESTS} with the global cap)"
        );
    }
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
