//! TLS beyond a private authority, against real `redis-server`s listening for TLS with
//! certificates made here by `openssl`: a client certificate for a server that requires one,
//! and a server certificate for a name other than the address dialed, accepted only when the
//! host-name check is skipped, and even then only from a trusted authority. The same settings
//! reach every node of a TLS cluster, and the sentinels and the primary they name.

use std::time::Duration;

use funnel::Quota;
use funnel_redis::{Builder, Error, OnFailure, RedisLimiter, Source};
use funnel_testkit::redis_server::{
    tls_cluster, tls_server, tls_server_with, RedisSentinel, RedisTls, RedisTlsCluster, TlsOptions,
};

use crate::common::GENEROUS;

/// Builds `builder` with a generous timeout and `OnFailure::Report`, so that every failure
/// reaches the test as an error.
async fn build_reporting(builder: Builder) -> Result<RedisLimiter, String> {
    builder
        .timeout(GENEROUS)
        .connect_timeout(Duration::from_secs(2))
        .on_failure(OnFailure::Report)
        .build()
        .await
        .map_err(|e| format!("build: {e}"))
}

/// Builds `builder` (on `tls`) and asks it once: `Ok` when Redis decided, the error
/// otherwise. A refused handshake can fail the build (`OnFailure::Report`) or, when the server
/// refuses only after the handshake (a missing client certificate under TLS 1.3), the first
/// request.
async fn decided_by_redis(tls: &RedisTls, builder: Builder) -> Result<(), String> {
    let limiter = build_reporting(builder).await?;
    let checked = limiter
        .check("k")
        .await
        .map_err(|e| format!("check: {e}"))?;
    if checked.source != Source::Redis {
        return Err(format!("answered by {:?}", checked.source));
    }
    let stored: bool = redis::cmd("EXISTS")
        .arg(limiter.redis_key("k"))
        .query(&mut tls.server().connection().unwrap())
        .unwrap();
    assert!(stored, "the decision was taken on this server");
    Ok(())
}

fn on(tls: &RedisTls) -> Builder {
    RedisLimiter::builder(tls.tls_url(), Quota::per_hour(5).unwrap())
}

fn requiring_client_certificates() -> Option<RedisTls> {
    tls_server_with(&TlsOptions {
        require_client_certificates: true,
        ..TlsOptions::default()
    })
}

fn named_elsewhere() -> Option<RedisTls> {
    tls_server_with(&TlsOptions {
        server_names: "DNS:redis.invalid".into(),
        ..TlsOptions::default()
    })
}

#[tokio::test]
async fn a_client_certificate_signed_by_the_authority_is_admitted() {
    let Some(tls) = requiring_client_certificates() else {
        return;
    };
    let builder = on(&tls)
        .tls_root_certificate(tls.ca_pem())
        .tls_client_certificate(tls.client_cert_pem(), tls.client_key_pem());
    decided_by_redis(&tls, builder)
        .await
        .expect("admitted with its certificate");
}

#[tokio::test]
async fn a_server_that_requires_a_client_certificate_refuses_a_client_without_one() {
    let Some(tls) = requiring_client_certificates() else {
        return;
    };
    let refused = decided_by_redis(&tls, on(&tls).tls_root_certificate(tls.ca_pem())).await;
    assert!(refused.is_err(), "no client certificate, yet decided");
}

#[tokio::test]
async fn a_client_certificate_of_another_authority_is_refused() {
    let Some(tls) = requiring_client_certificates() else {
        return;
    };
    let Some(other) = tls_server() else { return };
    let builder = on(&tls)
        .tls_root_certificate(tls.ca_pem())
        .tls_client_certificate(other.client_cert_pem(), other.client_key_pem());
    assert!(
        decided_by_redis(&tls, builder).await.is_err(),
        "a certificate the server's authority did not sign, yet decided"
    );
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused_unless_the_name_check_is_skipped() {
    let Some(tls) = named_elsewhere() else { return };
    let checked = decided_by_redis(&tls, on(&tls).tls_root_certificate(tls.ca_pem())).await;
    let e = checked.expect_err("a certificate for redis.invalid accepted at 127.0.0.1");
    assert!(
        e.contains("not valid for name"),
        "refused for its name: {e}"
    );
    let skipped = on(&tls)
        .tls_root_certificate(tls.ca_pem())
        .tls_skip_hostname_verification(true);
    decided_by_redis(&tls, skipped)
        .await
        .expect("the name check skipped, the chain trusted");
    let explicit_default = on(&tls)
        .tls_root_certificate(tls.ca_pem())
        .tls_skip_hostname_verification(false);
    assert!(decided_by_redis(&tls, explicit_default).await.is_err());
}

#[tokio::test]
async fn skipping_the_name_check_still_refuses_an_unknown_authority() {
    let Some(tls) = named_elsewhere() else { return };
    let Some(other) = tls_server() else { return };
    // Trusting another authority only, and the system's roots: neither signed the server's.
    for builder in [on(&tls).tls_root_certificate(other.ca_pem()), on(&tls)] {
        let checked = decided_by_redis(&tls, builder.tls_skip_hostname_verification(true)).await;
        let e = checked.expect_err(
            "a certificate of an unknown authority accepted with the name check skipped",
        );
        // Refused for its chain (an unknown issuer, or a signature the trusted authority of
        // the same name did not make), not for its name.
        assert!(e.contains("invalid peer certificate"), "{e}");
        assert!(!e.contains("not valid for name"), "{e}");
    }
}

#[tokio::test]
async fn client_certificate_and_skipped_name_check_together() {
    let Some(tls) = tls_server_with(&TlsOptions {
        require_client_certificates: true,
        server_names: "DNS:redis.invalid".into(),
    }) else {
        return;
    };
    let builder = on(&tls)
        .tls_root_certificate(tls.ca_pem())
        .tls_client_certificate(tls.client_cert_pem(), tls.client_key_pem())
        .tls_skip_hostname_verification(true);
    decided_by_redis(&tls, builder)
        .await
        .expect("both settings at once");
}

#[tokio::test]
async fn an_insecure_url_that_would_check_nothing_is_refused() {
    let quota = Quota::per_hour(5).unwrap();
    let e = RedisLimiter::builder("rediss://127.0.0.1:1/#insecure", quota)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidSetting { setting: "url", .. }),
        "{e}"
    );
}

#[tokio::test]
async fn a_client_certificate_file_without_a_certificate_or_key_is_refused_at_build() {
    let quota = Quota::per_hour(5).unwrap();
    let key = b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
    for (cert, key) in [
        (b"not a certificate".to_vec(), key.to_vec()),
        (Vec::new(), key.to_vec()),
    ] {
        let e = RedisLimiter::builder("rediss://127.0.0.1:1/", quota)
            .tls_client_certificate(cert, key)
            .build()
            .await
            .unwrap_err();
        assert_refused_certificate(&e);
    }
    let Some(tls) = tls_server() else { return };
    let e = RedisLimiter::builder(tls.tls_url(), quota)
        .tls_client_certificate(tls.client_cert_pem(), b"no key here".to_vec())
        .build()
        .await
        .unwrap_err();
    assert_refused_certificate(&e);
}

/// Asserts that `e` refuses the client certificate setting.
fn assert_refused_certificate(e: &Error) {
    assert!(
        matches!(
            e,
            Error::InvalidSetting {
                setting: "tls_client_certificate",
                ..
            }
        ),
        "{e}"
    );
}

/// Certificates that both require a client certificate and name a host no client dials: a
/// limiter needs every setting to get a decision.
fn strict() -> TlsOptions {
    TlsOptions {
        require_client_certificates: true,
        server_names: "DNS:redis.invalid".into(),
    }
}

/// A cluster limiter on `cluster`'s TLS seeds with the authority and, when asked, the client
/// certificate and the skipped name check; `Ok` when Redis decided keys on every node.
async fn decided_on_every_node(
    cluster: &RedisTlsCluster,
    client_certificate: bool,
    skip_name_check: bool,
) -> Result<(), String> {
    let certificates = cluster.certificates();
    let mut builder = RedisLimiter::builder("unused", Quota::per_hour(5).unwrap())
        .cluster(cluster.tls_urls())
        .tls_root_certificate(certificates.ca_pem())
        .tls_skip_hostname_verification(skip_name_check);
    if client_certificate {
        builder = builder.tls_client_certificate(
            certificates.client_cert_pem(),
            certificates.client_key_pem(),
        );
    }
    let limiter = build_reporting(builder).await?;
    let keys: Vec<String> = (0..24).map(|i| format!("tls:{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    for checked in limiter.check_many(&keys, 1).await {
        let checked = checked.map_err(|e| format!("check: {e}"))?;
        if checked.source != Source::Redis {
            return Err(format!("answered by {:?}", checked.source));
        }
    }
    for node in cluster.nodes() {
        let stored: u64 = redis::cmd("DBSIZE")
            .query(&mut node.connection().unwrap())
            .unwrap();
        assert!(stored > 0, "no key on the node of port {}", node.port());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_takes_the_client_certificate_and_the_skipped_name_check_on_every_node() {
    let Some(cluster) = tls_cluster(3, &strict()) else {
        return;
    };
    decided_on_every_node(&cluster, true, true)
        .await
        .expect("every setting given");
    let e = decided_on_every_node(&cluster, false, true)
        .await
        .expect_err("no client certificate, yet decided");
    assert!(!e.contains("not valid for name"), "{e}");
    let e = decided_on_every_node(&cluster, true, false)
        .await
        .expect_err("a certificate for redis.invalid accepted at 127.0.0.1");
    assert!(e.contains("not valid for name"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_their_primary_over_tls_take_the_client_certificate_and_the_skipped_name_check(
) {
    let Some(tls) = tls_server_with(&strict()) else {
        return;
    };
    let sentinel = tls
        .start_sentinel()
        .unwrap_or_else(|e| panic!("a TLS sentinel: {e}"));
    let through_sentinel = |client_certificate: bool, skip_name_check: bool| {
        let builder = RedisLimiter::builder("unused", Quota::per_hour(5).unwrap())
            .sentinel(RedisSentinel::MASTER_NAME, [sentinel.tls_url()])
            .tls_root_certificate(tls.ca_pem())
            .tls_skip_hostname_verification(skip_name_check);
        if client_certificate {
            builder.tls_client_certificate(tls.client_cert_pem(), tls.client_key_pem())
        } else {
            builder
        }
    };
    decided_by_redis(&tls, through_sentinel(true, true))
        .await
        .expect("every setting given");
    assert!(
        decided_by_redis(&tls, through_sentinel(false, true))
            .await
            .is_err(),
        "no client certificate, yet decided"
    );
    let e = decided_by_redis(&tls, through_sentinel(true, false))
        .await
        .expect_err("a certificate for redis.invalid accepted at 127.0.0.1");
    assert!(e.contains("not valid for name"), "{e}");
}
