//! proto3's JSON mapping of the request and the response, for `POST /json`: read and written
//! through prost-reflect from the descriptors the build compiled, so the field names
//! (`hitsAddend`, `overallCode`, `limitRemaining`, ...), enums as names and durations as
//! `"1.5s"` are the mapping's, not hand-written.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};

use crate::proto::{RateLimitRequest, RateLimitResponse, DESCRIPTORS};

fn message(name: &str) -> MessageDescriptor {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(DESCRIPTORS).expect("the build wrote a valid descriptor set")
    })
    .get_message_by_name(name)
    .expect("the descriptor set holds the rate-limit messages")
}

/// A request from its proto3 JSON.
pub fn request_from_json(body: &[u8]) -> Result<RateLimitRequest, String> {
    let desc = message("envoy.service.ratelimit.v3.RateLimitRequest");
    let mut de = serde_json::Deserializer::from_slice(body);
    let msg = DynamicMessage::deserialize(desc, &mut de)
        .map_err(|e| format!("not a RateLimitRequest in proto3 JSON: {e}"))?;
    de.end()
        .map_err(|e| format!("trailing data after the request: {e}"))?;
    msg.transcode_to::<RateLimitRequest>()
        .map_err(|e| e.to_string())
}

/// A response as proto3 JSON.
pub fn response_to_json(r: &RateLimitResponse) -> String {
    let desc = message("envoy.service.ratelimit.v3.RateLimitResponse");
    let mut msg = DynamicMessage::new(desc);
    if msg.transcode_from(r).is_err() {
        return "{}".into();
    }
    let mut out = serde_json::Serializer::new(Vec::new());
    let opts = SerializeOptions::new();
    if msg.serialize_with_options(&mut out, &opts).is_err() {
        return "{}".into();
    }
    String::from_utf8(out.into_inner()).unwrap_or_default()
}
