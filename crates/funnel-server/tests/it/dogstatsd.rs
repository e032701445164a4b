//! DogStatsD: the datagrams funnel-server sends to a UDP socket of the test's, standing in for
//! Datadog's agent. envoyproxy/ratelimit's names with the extra tags as tags, the README's
//! mogrifiers turning names into a name and tags, from flags or from envoyproxy/ratelimit's
//! variables alone, and a wrong mogrifier refusing the start by name.

use std::net::UdpSocket;
use std::process::Command;

use crate::common::*;
use crate::metrics::CONFIG;

/// The README's HITS mogrifier: the rule's statistic as the name, domain and descriptor as
/// tags.
const HITS_PATTERN: &str = r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$";
const HITS_NAME: &str = "ratelimit.service.rate_limit.$3";
const HITS_TAGS: &str = "domain:$1,descriptor:$2";

#[tokio::test]
async fn dogstatsd_receives_envoyproxy_names_with_the_extra_tags_as_tags() {
    let dir = scratch("dogstatsd");
    let (s, socket) = start_with_statsd(
        &write_config(&dir, "shop.yaml", CONFIG),
        &["--dogstatsd", "--extra-tags", "cluster:blue,zone:z1"],
    );
    statsd_calls(&s).await;
    assert_received(
        &socket,
        &[
            "ratelimit.service.config_load_success:1|c|#cluster:blue,zone:z1",
            "ratelimit.service.rate_limit.shop.client.total_hits:3|c|#cluster:blue,zone:z1",
            "ratelimit.service.rate_limit.shop.client.within_limit:2|c|#cluster:blue,zone:z1",
            "ratelimit.service.rate_limit.shop.client.over_limit:1|c|#cluster:blue,zone:z1",
            "ratelimit.service.rate_limit.shop.path_/cart.user.total_hits:1|c|#cluster:blue,zone:z1",
            "ratelimit.service.rate_limit.shop.path_/cart.user_bo_b.total_hits:1|c|#cluster:blue,zone:z1",
            "ratelimit_server.ShouldRateLimit.total_requests:4|c|#cluster:blue,zone:z1",
        ],
    );
}

#[tokio::test]
async fn mogrifiers_from_flags_are_tried_in_order() {
    let dir = scratch("dogstatsd-flags");
    let (s, socket) = start_with_statsd(
        &write_config(&dir, "shop.yaml", CONFIG),
        &[
            "--dogstatsd",
            // The client rule's statistics under names of their own; HITS would match them
            // too, but comes second.
            "--dogstatsd-mogrifier",
            r"^ratelimit\.service\.rate_limit\.shop\.client\.(.*)$",
            "shop.clients.$1",
            "",
            "--dogstatsd-mogrifier",
            HITS_PATTERN,
            HITS_NAME,
            HITS_TAGS,
        ],
    );
    statsd_calls(&s).await;
    assert_received(
        &socket,
        &[
            "shop.clients.total_hits:3|c",
            "shop.clients.over_limit:1|c",
            "ratelimit.service.rate_limit.total_hits:1|c|#domain:shop,descriptor:path_/cart.user",
            "ratelimit.service.rate_limit.total_hits:1|c|#domain:shop,descriptor:path_/cart.user_bo_b",
            "ratelimit.service.config_load_success:1|c",
        ],
    );
}

/// The binary with `vars` as its whole environment and envoyproxy/ratelimit's layout under
/// `root` (`RUNTIME_ROOT/ratelimit/config/shop.yaml`): no flag at all.
fn from_environment(root: &std::path::Path, vars: &[(&str, &str)]) -> Command {
    let config = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("shop.yaml"), CONFIG).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_funnel-server"));
    c.env_clear()
        .env("RUNTIME_ROOT", root)
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("RUNTIME_WATCH_ROOT", "false")
        .env("HOST", "127.0.0.1")
        .env("PORT", "0")
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", "0")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", "0");
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

#[tokio::test]
async fn the_readme_mogrifiers_from_envoyproxy_variables_alone() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port().to_string();
    let root = scratch("dogstatsd-env");
    let command = from_environment(
        &root,
        &[
            ("USE_DOG_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
            ("EXTRA_TAGS", "cluster:blue"),
            // The README's two mogrifiers, as written there: DOMAIN matches no statistic of
            // the service and lets every name through to HITS.
            ("USE_DOG_STATSD_MOGRIFIERS", "DOMAIN,HITS"),
            (
                "DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN",
                r"^some\.original\.metric\.(.*)$",
            ),
            ("DOG_STATSD_MOGRIFIER_DOMAIN_NAME", "some.original.metric"),
            ("DOG_STATSD_MOGRIFIER_DOMAIN_TAGS", "domain:$1"),
            ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", HITS_PATTERN),
            ("DOG_STATSD_MOGRIFIER_HITS_NAME", HITS_NAME),
            ("DOG_STATSD_MOGRIFIER_HITS_TAGS", HITS_TAGS),
        ],
    );
    let s = Server::launch(command, root.join("stderr")).unwrap_or_else(|e| panic!("{e}"));
    statsd_calls(&s).await;
    assert_received(
        &socket,
        &[
            "ratelimit.service.rate_limit.total_hits:3|c|#cluster:blue,domain:shop,descriptor:client",
            "ratelimit.service.rate_limit.within_limit:2|c|#cluster:blue,domain:shop,descriptor:client",
            "ratelimit.service.rate_limit.over_limit:1|c|#cluster:blue,domain:shop,descriptor:client",
            "ratelimit.service.rate_limit.total_hits:1|c|#cluster:blue,domain:shop,descriptor:path_/cart.user",
            "ratelimit.service.rate_limit.total_hits:1|c|#cluster:blue,domain:shop,descriptor:path_/cart.user_bo_b",
            // No mogrifier matches: the name as it is, the extra tag still a tag.
            "ratelimit.service.config_load_success:1|c|#cluster:blue",
            "ratelimit_server.ShouldRateLimit.total_requests:4|c|#cluster:blue",
        ],
    );
}

#[test]
fn a_wrong_mogrifier_refuses_the_start_naming_its_variable() {
    let root = scratch("dogstatsd-refused");
    let base = [
        ("USE_DOG_STATSD", "true"),
        ("USE_DOG_STATSD_MOGRIFIERS", "HITS"),
    ];
    for (wrong, named) in [
        (
            [
                ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", r"^ratelimit\.(.*"),
                ("DOG_STATSD_MOGRIFIER_HITS_NAME", HITS_NAME),
            ],
            "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
        ),
        (
            [
                ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", HITS_PATTERN),
                ("DOG_STATSD_MOGRIFIER_HITS_TAGS", HITS_TAGS),
            ],
            "DOG_STATSD_MOGRIFIER_HITS_NAME",
        ),
    ] {
        let mut vars = base.to_vec();
        vars.extend(wrong);
        let out = from_environment(&root, &vars).output().unwrap();
        assert!(!out.status.success(), "started with {vars:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{named} not named in: {err}");
    }
    // The same from a flag, which names the part.
    let dir = scratch("dogstatsd-refused-flag");
    let config = write_config(&dir, "shop.yaml", CONFIG);
    let e = Server::try_start(
        &config,
        &[
            "--statsd",
            "127.0.0.1:9",
            "--dogstatsd",
            "--dogstatsd-mogrifier",
            r"^ratelimit\.(.*",
            HITS_NAME,
            HITS_TAGS,
        ],
    )
    .err()
    .expect("refused");
    assert!(e.contains("--dogstatsd-mogrifier's PATTERN"), "{e}");
}
