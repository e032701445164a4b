"""An independent client of funnel-server: Envoy's v3 messages as the PyPI package
envoy-data-plane generates them (betterproto2), sent with grpcio's sync stub.

Usage: python3 envoy_check.py HOST:PORT [CA CERT KEY]  (the server runs tests/envoy_check.yaml).
With CA, CERT and KEY (PEM files): over mutual TLS, the server checked against CA, the client
presenting CERT.
Exits non-zero with a message on the first answer that is not the expected one.
"""

import sys

import grpc
from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import (
    RateLimitDescriptor,
    RateLimitDescriptorEntry,
    RateLimitDescriptorRateLimitOverride,
)
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitRequest,
    RateLimitResponseCode,
    RateLimitResponseRateLimitUnit,
    RateLimitServiceSyncStub,
)
from envoy_data_plane.envoy.type.v3 import RateLimitUnit


def descriptor(*entries, hits=None, limit=None):
    d = RateLimitDescriptor(entries=[RateLimitDescriptorEntry(key=k, value=v) for k, v in entries])
    if hits is not None:
        d.hits_addend = hits
    if limit is not None:
        d.limit = limit
    return d


def main():
    if len(sys.argv) == 5:
        ca, cert, key = (open(path, "rb").read() for path in sys.argv[2:5])
        credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        channel = grpc.secure_channel(sys.argv[1], credentials)
    else:
        channel = grpc.insecure_channel(sys.argv[1])
    stub = RateLimitServiceSyncStub(channel)

    def call(*descriptors, hits_addend=0):
        return stub.should_rate_limit(
            RateLimitRequest(domain="edge", descriptors=list(descriptors), hits_addend=hits_addend)
        )

    def expect(what, got, want):
        if got != want:
            sys.exit(f"{what}: got {got!r}, want {want!r}")

    # 4 per minute for each remote address.
    ip = descriptor(("remote_address", "10.0.0.1"))
    codes = [call(ip).overall_code for _ in range(6)]
    expect("admissions of 6 calls under 4/minute", codes, [RateLimitResponseCode.OK] * 4 + [RateLimitResponseCode.OVER_LIMIT] * 2)
    r = call(ip)
    s = r.statuses[0]
    expect("current limit", (s.current_limit.requests_per_unit, s.current_limit.unit), (4, RateLimitResponseRateLimitUnit.MINUTE))
    expect("limit remaining when over", s.limit_remaining, 0)
    if not (0 < s.duration_until_reset.total_seconds() <= 15):
        sys.exit(f"duration_until_reset {s.duration_until_reset} is not within one emission interval (15 s)")

    # Nested: path under an authenticated flag; all or nothing with the address.
    other = descriptor(("remote_address", "10.0.0.2"))
    nested = descriptor(("authenticated", "false"), ("path", "/login"))
    expect("first nested", call(other, nested).overall_code, RateLimitResponseCode.OK)
    r = call(other, nested)
    expect("nested denied", [x.code for x in r.statuses], [RateLimitResponseCode.OK, RateLimitResponseCode.OVER_LIMIT])
    expect("the address was not charged for the denied request", r.statuses[0].limit_remaining, 3)

    # A descriptor's hits_addend 0 checks without charging; the request's hits_addend charges.
    fresh = descriptor(("remote_address", "10.0.0.3"))
    for _ in range(5):
        r = call(descriptor(("remote_address", "10.0.0.3"), hits=0))
        expect("check only", (r.overall_code, r.statuses[0].limit_remaining), (RateLimitResponseCode.OK, 4))
    r = call(fresh, hits_addend=3)
    expect("3 units", (r.overall_code, r.statuses[0].limit_remaining), (RateLimitResponseCode.OK, 1))

    # Shadow mode: always OK.
    shadow = descriptor(("tenant", "trial"))
    expect("shadow mode", {call(shadow).overall_code for _ in range(5)}, {RateLimitResponseCode.OK})

    # A limit sent with the descriptor.
    override = RateLimitDescriptorRateLimitOverride(requests_per_unit=2, unit=RateLimitUnit.HOUR)
    o = descriptor(("remote_address", "10.0.0.4"), limit=override)
    expect("override admissions", [call(o).overall_code for _ in range(3)], [RateLimitResponseCode.OK] * 2 + [RateLimitResponseCode.OVER_LIMIT])

    # Unknown domain: OK; an empty domain: INVALID_ARGUMENT.
    r = stub.should_rate_limit(RateLimitRequest(domain="elsewhere", descriptors=[ip]))
    expect("unknown domain", r.overall_code, RateLimitResponseCode.OK)
    try:
        stub.should_rate_limit(RateLimitRequest(domain="", descriptors=[ip]))
        sys.exit("an empty domain was answered")
    except grpc.RpcError as e:
        expect("empty domain", e.code(), grpc.StatusCode.INVALID_ARGUMENT)
    print("envoy-data-plane check: all answers as expected")


if __name__ == "__main__":
    main()
