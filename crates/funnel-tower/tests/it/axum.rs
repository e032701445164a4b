//! The layer on an axum router served by `axum::serve` with connect info. The first test runs
//! the README's snippet, and the last checks that the crate's README shows exactly that code.

use std::net::SocketAddr;

use crate::common::{draft_fields, get_from, member};
use axum::routing::get;
use axum::Router;
use funnel::Quota;
use funnel_tower::{KeyBy, RateLimitLayer};
use http::StatusCode;
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn handler() -> &'static str {
    "hello"
}

/// The README's code, between the markers, word for word.
async fn readme(listener: TcpListener) -> Result<(), BoxError> {
    // README snippet: begin
    let limits = RateLimitLayer::builder()
        .policy(
            "ip",
            KeyBy::PeerIp { v6_prefix: 64 },
            Quota::per_second(10)?.with_limit(20)?,
        )
        .policy("route", KeyBy::Route, Quota::per_minute(1000)?) // per route template
        .build()?;
    let app = Router::new()
        .route("/users/{id}", get(handler))
        .layer(limits.clone()); // the peer address comes from axum's ConnectInfo
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    // README snippet: end
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_snippet_limits_an_axum_router() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { readme(listener).await.unwrap() });
    // A burst of 20 from one address (and the units that come back while it runs, one per
    // 100 ms), another address unaffected.
    let mut ok = 0;
    let mut first_denial = None;
    for i in 0..60 {
        let r = get_from(addr, "127.0.0.2", &format!("/users/{i}")).await;
        match r.status {
            StatusCode::OK => {
                assert_eq!(r.body, "hello");
                ok += 1;
            }
            StatusCode::TOO_MANY_REQUESTS => {
                first_denial.get_or_insert(r);
                break;
            }
            s => panic!("status {s}"),
        }
    }
    let denial = first_denial.expect("the burst runs out");
    assert!((20..=40).contains(&ok), "{ok} admitted");
    let (policy, state) = draft_fields(&denial);
    assert_eq!(member(&policy, "ip").get("q"), 20);
    assert_eq!(member(&policy, "route").get("q"), 1000);
    // Every /users/{id} is one route: its funnel holds every admitted request, less what
    // drained back meanwhile (one unit per 60 ms). Keyed by the raw path, each would show 999.
    let route_left = member(&state, "route").get("r");
    assert!((1000 - ok..=990).contains(&route_left), "{route_left}");
    let r = get_from(addr, "127.0.0.3", "/users/1").await;
    assert_eq!(r.status, StatusCode::OK);
}

/// `KeyBy::Route` keys on the matched route template; requests without one (the fallback)
/// on the raw path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_key_is_the_matched_template_and_the_raw_path_without_one() {
    let limits = RateLimitLayer::builder()
        .policy("route", KeyBy::Route, Quota::per_hour(2).unwrap())
        .build()
        .unwrap();
    let app = Router::new()
        .route("/users/{id}", get(handler))
        .fallback(handler)
        .layer(limits.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    let status = |path: &'static str| async move { get_from(addr, "127.0.0.1", path).await.status };
    assert_eq!(status("/users/1").await, StatusCode::OK);
    assert_eq!(status("/users/2").await, StatusCode::OK);
    assert_eq!(status("/users/3").await, StatusCode::TOO_MANY_REQUESTS);
    // No matched route: each raw path is its own key.
    for path in ["/nope/1", "/nope/1", "/nope/2", "/nope/2"] {
        assert_eq!(status(path).await, StatusCode::OK, "{path}");
    }
    assert_eq!(status("/nope/1").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limits.stats("route").unwrap().denied, 2);
}

/// The snippet as the crate's README shows it: the ```rust block that builds a `RateLimitLayer`.
fn readme_snippet(readme: &str) -> String {
    readme
        .split("```rust")
        .skip(1)
        .filter_map(|block| {
            let code = &block[block.find('\n')? + 1..];
            Some(&code[..code.find("```")?])
        })
        .find(|code| code.contains("RateLimitLayer::builder()") && code.contains("Router"))
        .expect("an axum block")
        .to_string()
}

/// The code with its layout removed: whitespace, and the trailing commas rustfmt adds when it
/// breaks a call over several lines.
fn without_layout(s: &str) -> String {
    let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    text.replace(",)", ")")
}

#[test]
fn the_readme_shows_exactly_the_code_the_first_test_runs() {
    let this = include_str!("axum.rs");
    let begin = this.find("// README snippet: begin\n").unwrap() + 25;
    let end = this.find("    // README snippet: end").unwrap();
    let tested = without_layout(&this[begin..end]);
    assert_eq!(
        without_layout(&readme_snippet(include_str!("../../README.md"))),
        tested,
        "crates/funnel-tower/README.md's axum snippet is not the code tests/it/axum.rs runs (layout aside)"
    );
}
