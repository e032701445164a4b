//! The forward-auth endpoint called directly, as a proxy would: the actions' descriptors, the
//! client's address behind a trusted peer (IPv6 by /64), the denial's status and headers,
//! shadow mode, refusals, hostile input, and the Traefik files' fields.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use crate::common::{scratch, write_config, Server};

/// A raw HTTP/1.1 exchange with `Connection: close`: `head_lines` are written as given (any
/// bytes). Returns the status and the response head in lower case.
fn raw(addr: SocketAddr, request_line: &str, head_lines: &[Vec<u8>]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{request_line}\r\nHost: funnel\r\nConnection: close\r\n").into_bytes();
    for l in head_lines {
        req.extend_from_slice(l);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    // The server may answer and close before reading a head it refuses.
    let _ = s.write_all(&req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_owned();
    (status, head)
}

fn ask(s: &Server, path: &str, headers: &[&str]) -> (u16, String) {
    let lines: Vec<Vec<u8>> = headers.iter().map(|h| h.as_bytes().to_vec()).collect();
    raw(s.http, &format!("GET {path} HTTP/1.1"), &lines)
}

const RULES: &str = "\
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: header_match
    value: writes
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
";

const FORWARD_AUTH: &str = "\
client_address:
  trusted_proxies: [\"127.0.0.1\"]
  ipv6_prefix: 64
domains:
  by_ip:
    - actions:
        - remote_address: {}
  by_key:
    - actions:
        - request_headers: {header_name: x-api-key, descriptor_key: api_key}
  writes:
    - actions:
        - header_value_match:
            descriptor_value: writes
            headers: [{name: \":method\", exact_match: POST}]
        - request_headers: {header_name: \":path\", descriptor_key: path}
  shadowed:
    - actions:
        - request_headers: {header_name: x-tenant, descriptor_key: tenant}
";

/// The same rules under every domain of the forward-auth file.
fn server() -> Server {
    let dir = scratch("fa");
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    for domain in ["by_ip", "by_key", "writes", "shadowed"] {
        write_config(
            &rules,
            &format!("{domain}.yaml"),
            &RULES.replace("domain: web", &format!("domain: {domain}")),
        );
    }
    let fa = write_config(&dir, "forward-auth.yaml", FORWARD_AUTH);
    Server::start(
        &rules,
        &["--no-watch", "--forward-auth", fa.to_str().unwrap()],
    )
}

fn statuses(s: &Server, path: &str, headers: &[&str], n: usize) -> Vec<u16> {
    (0..n).map(|_| ask(s, path, headers).0).collect()
}

#[test]
fn ipv6_clients_behind_a_trusted_proxy_are_counted_by_their_64() {
    let s = server();
    let a1 = "X-Forwarded-For: 198.51.100.1, 2001:db8:1:2::a";
    let a2 = "X-Forwarded-For: 2001:db8:1:2:ffff::b";
    let b = "X-Forwarded-For: 2001:db8:1:3::1";
    assert_eq!(ask(&s, "/forward-auth/by_ip", &[a1]).0, 200);
    assert_eq!(ask(&s, "/forward-auth/by_ip", &[a2]).0, 200);
    assert_eq!(
        ask(&s, "/forward-auth/by_ip", &[a1]).0,
        429,
        "one /64, one count"
    );
    assert_eq!(
        statuses(&s, "/forward-auth/by_ip", &[b], 3),
        [200, 200, 429]
    );
}

#[test]
fn a_denial_carries_retry_after_and_the_ratelimit_fields_in_the_asked_status() {
    let s = server();
    let k = "X-Api-Key: k1";
    let (status, head) = ask(&s, "/forward-auth/by_key", &[k]);
    assert_eq!(status, 200);
    assert!(
        head.contains("ratelimit-policy: \"limit\";q=3;w=60"),
        "{head}"
    );
    assert!(head.contains("ratelimit: \"limit\";r=2;t="), "{head}");
    assert!(!head.contains("retry-after"), "{head}");
    assert_eq!(statuses(&s, "/forward-auth/by_key", &[k], 2), [200, 200]);
    let (status, head) = ask(&s, "/forward-auth/by_key?deny_status=403", &[k]);
    assert_eq!(status, 403);
    // 3 per minute: the next in 20 s.
    assert!(head.contains("retry-after: 20"), "{head}");
    assert!(head.contains("ratelimit: \"limit\";r=0;t=20"), "{head}");
    assert_eq!(ask(&s, "/forward-auth/by_key", &[k]).0, 429);
    assert_eq!(ask(&s, "/forward-auth/by_key?deny_status=401", &[k]).0, 401);
    // Without the header the action builds no descriptor: allowed, uncounted.
    assert_eq!(statuses(&s, "/forward-auth/by_key", &[], 5), [200; 5]);
}

#[test]
fn header_value_match_and_pseudo_headers_read_the_original_request() {
    let s = server();
    let post = "X-Forwarded-Method: POST";
    let uri = |u: &str| format!("X-Forwarded-Uri: {u}");
    // One POST per minute per URI; reads go through uncounted.
    assert_eq!(ask(&s, "/forward-auth/writes", &[post, &uri("/a")]).0, 200);
    assert_eq!(ask(&s, "/forward-auth/writes", &[post, &uri("/a")]).0, 429);
    assert_eq!(ask(&s, "/forward-auth/writes", &[post, &uri("/b")]).0, 200);
    let get = "X-Forwarded-Method: GET";
    assert_eq!(
        statuses(&s, "/forward-auth/writes", &[get, &uri("/a")], 3),
        [200; 3]
    );
    // Without X-Forwarded-Method, the request's own method (nginx's subrequest keeps it).
    let line = "POST /forward-auth/writes HTTP/1.1";
    let lines = [uri("/c").into_bytes(), b"Content-Length: 0".to_vec()];
    assert_eq!(raw(s.http, line, &lines).0, 200);
    assert_eq!(raw(s.http, line, &lines).0, 429);
}

#[test]
fn shadow_mode_answers_200_and_counts_the_overage() {
    let s = server();
    let t = "X-Tenant: acme";
    assert_eq!(statuses(&s, "/forward-auth/shadowed", &[t], 3), [200; 3]);
    let (_, metrics) = s.get("/metrics");
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                "ratelimit_service_rate_limit_shadow_mode_total{domain=\"shadowed\",key=\"tenant\"}",
            )
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.ends_with(" 2"), "{line}");
}

#[test]
fn unknown_domains_and_queries_are_refused_and_without_the_file_nothing_is_served() {
    let s = server();
    let (status, _) = ask(&s, "/forward-auth/nope", &[]);
    assert_eq!(status, 404);
    assert_eq!(ask(&s, "/forward-auth/by_ip?deny_status=500", &[]).0, 400);
    // Other parameters (the original request's, from Caddy or Traefik) are ignored.
    assert_eq!(ask(&s, "/forward-auth/by_ip?x&q=1", &[]).0, 200);
    let dir = scratch("fa-none");
    let rules = write_config(&dir, "web.yaml", RULES);
    let plain = Server::start(&rules, &["--no-watch"]);
    assert_eq!(ask(&plain, "/forward-auth/web", &[]).0, 404);
}

#[test]
fn a_bad_forward_auth_file_stops_the_start_naming_file_and_line() {
    let dir = scratch("fa-bad");
    let rules = write_config(&dir, "web.yaml", RULES);
    let fa = write_config(
        &dir,
        "fa.yaml",
        "domains:\n  web:\n    - actions:\n        - remote_adress: {}\n",
    );
    let err = Server::try_start(&rules, &["--forward-auth", fa.to_str().unwrap()])
        .err()
        .expect("refused");
    assert!(
        err.contains("fa.yaml:4: unknown field `remote_adress`"),
        "{err}"
    );
}

#[test]
fn hostile_requests_are_answered_without_a_5xx() {
    let s = server();
    let huge = vec![b'x'; 60 * 1024];
    let mut hostile: Vec<Vec<Vec<u8>>> = vec![
        vec![[b"X-Api-Key: ".as_slice(), &huge].concat()],
        vec![[b"X-Forwarded-For: ".as_slice(), &huge].concat()],
        vec![b"X-Api-Key: \xff\xfe\x80".to_vec()],
        vec![b"X-Forwarded-For: \xff, 1.2.3.4, ::1%eth0, [::1]:80, 300.1.1.1".to_vec()],
        vec![
            b"X-Forwarded-Uri: \xff\x00".to_vec(),
            b"X-Forwarded-Method: \xc3".to_vec(),
        ],
        vec![b"Forwarded: for=\"[::1".to_vec()],
        vec![b"X-Tenant:".to_vec()],
    ];
    hostile.push(
        (0..200)
            .map(|i| format!("X-Api-Key: k{i}").into_bytes())
            .collect(),
    );
    for domain in ["by_ip", "by_key", "writes", "shadowed"] {
        for (i, lines) in hostile.iter().enumerate() {
            let line = format!("GET /forward-auth/{domain} HTTP/1.1");
            let (status, head) = raw(s.http, &line, lines);
            assert!(
                (200..500).contains(&status),
                "{domain}, request {i}: {status}\n{head}\n{}",
                s.log()
            );
        }
    }
    // Paths that are not a domain name, methods of every kind.
    for line in [
        "GET /forward-auth/%ff%fe HTTP/1.1",
        "GET /forward-auth/ HTTP/1.1",
        "DELETE /forward-auth/by_ip HTTP/1.1",
        "OPTIONS /forward-auth/by_ip HTTP/1.1",
        "HEAD /forward-auth/by_ip HTTP/1.1",
    ] {
        let (status, head) = raw(s.http, line, &[]);
        assert!((200..500).contains(&status), "{line}: {status}\n{head}");
    }
}

/// Traefik is not packaged here: its files are checked to be YAML with the fields its
/// documentation names, pointing at the endpoint.
#[test]
fn the_traefik_files_name_the_endpoint_and_the_middleware() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/traefik");
    let load = |name: &str| {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        marked_yaml::parse_yaml(0, text).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let static_ = load("traefik.yml");
    let web = static_
        .as_mapping()
        .and_then(|m| m.get_mapping("entryPoints"))
        .and_then(|m| m.get_mapping("web"))
        .and_then(|m| m.get_scalar("address"))
        .expect("entryPoints.web.address");
    assert!(web.as_str().starts_with("127.0.0.1:"));
    let file = static_
        .as_mapping()
        .and_then(|m| m.get_mapping("providers"))
        .and_then(|m| m.get_mapping("file"))
        .and_then(|m| m.get_scalar("filename"))
        .expect("providers.file.filename");
    assert_eq!(file.as_str(), "dynamic.yml");
    let dynamic = load("dynamic.yml");
    let http = dynamic
        .as_mapping()
        .and_then(|m| m.get_mapping("http"))
        .unwrap();
    let auth = http
        .get_mapping("middlewares")
        .and_then(|m| m.get_mapping("funnel-rate-limit"))
        .and_then(|m| m.get_mapping("forwardAuth"))
        .expect("http.middlewares.funnel-rate-limit.forwardAuth");
    assert_eq!(
        auth.get_scalar("address").unwrap().as_str(),
        "http://127.0.0.1:8080/forward-auth/web"
    );
    assert_eq!(
        auth.get_scalar("trustForwardHeader").unwrap().as_bool(),
        Some(false)
    );
    let router = http
        .get_mapping("routers")
        .and_then(|m| m.get_mapping("app"))
        .unwrap();
    let middlewares = router.get_sequence("middlewares").unwrap();
    assert_eq!(
        middlewares.get_scalar(0).unwrap().as_str(),
        "funnel-rate-limit"
    );
    let service = router.get_scalar("service").unwrap().as_str();
    assert!(http
        .get_mapping("services")
        .and_then(|m| m.get_mapping(service))
        .and_then(|m| m.get_mapping("loadBalancer"))
        .is_some());
}

/// The README shows the very files the tests run.
#[test]
fn the_readme_shows_the_deploy_files_as_they_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for file in [
        "deploy/forward-auth.yaml",
        "deploy/rules/web.yaml",
        "deploy/nginx/funnel.conf",
        "deploy/caddy/Caddyfile",
        "deploy/traefik/dynamic.yml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            readme.contains(text.trim_end()),
            "README.md shows {file} as it is"
        );
    }
}

#[test]
fn with_header_x_real_ip_the_trusted_proxys_x_real_ip_names_the_client() {
    let dir = scratch("fa-real-ip");
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    write_config(
        &rules,
        "by_ip.yaml",
        &RULES.replace("domain: web", "domain: by_ip"),
    );
    let fa = write_config(
        &dir,
        "fa.yaml",
        &FORWARD_AUTH.replace(
            "  ipv6_prefix: 64",
            "  header: x-real-ip\n  ipv6_prefix: 64",
        ),
    );
    let s = Server::start(
        &rules,
        &["--no-watch", "--forward-auth", fa.to_str().unwrap()],
    );
    let real = "X-Real-IP: 2001:db8:5:6::1";
    // X-Forwarded-For is not read: a different one each time changes nothing.
    let statuses: Vec<u16> = (0..3)
        .map(|i| {
            let forged = format!("X-Forwarded-For: 192.0.2.{i}");
            ask(&s, "/forward-auth/by_ip", &[real, &forged]).0
        })
        .collect();
    assert_eq!(statuses, [200, 200, 429]);
    // Same /64, same count; garbage falls back to the peer (its own count).
    assert_eq!(
        ask(&s, "/forward-auth/by_ip", &["X-Real-IP: 2001:db8:5:6::2"]).0,
        429
    );
    assert_eq!(
        statuses_of(&s, &["X-Real-IP: not-an-address"], 3),
        [200, 200, 429]
    );
}

fn statuses_of(s: &Server, headers: &[&str], n: usize) -> Vec<u16> {
    statuses(s, "/forward-auth/by_ip", headers, n)
}
