//! cargo-fuzz target `redis_reply`: the body is `funnel_redis::fuzzing::reply`
//! (`crates/funnel-redis/src/fuzzing.rs`, cargo feature `fuzzing`), checked against the test
//! kit's plain reading of a reply (`funnel_testkit::redis_reply`); shared with the stable
//! replay test `crates/funnel-redis/tests/it/fuzz_bodies.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    funnel_redis::fuzzing::reply(data, funnel_testkit::redis_reply::admitted);
});
