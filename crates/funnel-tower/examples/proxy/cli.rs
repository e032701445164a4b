//! The flags the example proxy shares with the lab's load-test proxy
//! (`crates/lab/examples/loadtest_proxy.rs` includes this file, so both parse them alike):
//! their help, their parser, and the layer they describe. Each binary adds its own flags
//! through [`parse`]'s `own`.

use std::net::SocketAddr;

use funnel_tower::spec::parse_limit;
use funnel_tower::{Builder, Net, RateLimitLayer, Report};
use http::Uri;

/// The shared flags' help, one `OPTIONS:` entry each.
pub const OPTIONS: &str = "    \
    --listen <addr:port>   where to listen (default 127.0.0.1:8080; port 0 picks a free one;
                           the address listened on is printed to stderr)
    --upstream <url>       the upstream, http://host:port (required)
    --limit <spec>         a limit, repeatable; every limit is charged or none:
                               <key>=<count>/<period>[,burst=<n>]
                           count requests per period, one every period/count once the burst
                           is used up; burst is how many may come at once, and defaults to
                           count.
                               key:    ip | ip/<v6 prefix> | client | client-forwarded
                                       | route | global | header:<name>
                               period: <n>ms | <n>s | <n>m | <n>h (a bare number is seconds)
                           e.g. \"ip=10/1s,burst=20\" (10 per second, 20 at once)
                                \"route=1000/60s\" \"header:x-api-key=100/1m\"
                           ip is the peer (IPv6 grouped by /64 unless ip/<prefix>); client is
                           the address a trusted proxy appended to X-Forwarded-For (see
                           --trust), client-forwarded the same from Forwarded; route is the
                           request path.
    --trust <net>          a proxy in front of this one whose X-Forwarded-For (or Forwarded)
                           the client keys believe (repeatable; none by default)
    --exempt-path <path>   requests under this path pass unlimited (whole segments: /health
                           exempts /health/db, not /healthz; a path with a dot segment or an
                           encoded slash is never exempt); repeatable
    --shadow               evaluate and count, add headers, never reject
    --legacy-headers       X-RateLimit-Limit/Remaining/Reset instead of RateLimit-Policy/RateLimit
    --closest              RateLimit headers for the policy closest to its limit only
";

/// The shared flags' values.
pub struct Args {
    pub listen: SocketAddr,
    pub upstream: Uri,
    /// `--limit` specs, as given (`funnel_tower::spec` parses them).
    pub limits: Vec<String>,
    pub trusted: Vec<Net>,
    pub exempt_paths: Vec<String>,
    pub shadow: bool,
    pub report: Report,
}

/// Parses `argv` (without the program's name). A flag not shared goes to `own` with the
/// arguments after it (for its value, through [`value`]); `own` says whether it was one of
/// the binary's own. `-h` / `--help` prints `help` and exits.
///
/// `--upstream` is required; how many `--limit`s are needed is each binary's call.
pub fn parse(
    argv: impl IntoIterator<Item = String>,
    help: &str,
    mut own: impl FnMut(&str, &mut dyn Iterator<Item = String>) -> Result<bool, String>,
) -> Result<Args, String> {
    let mut it = argv.into_iter();
    let mut args = Args {
        listen: "127.0.0.1:8080".parse().expect("a valid default"),
        upstream: Uri::default(),
        limits: Vec::new(),
        trusted: Vec::new(),
        exempt_paths: Vec::new(),
        shadow: false,
        report: Report::All,
    };
    let mut upstream = None;
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => {
                print!("{help}");
                std::process::exit(0);
            }
            "--listen" => {
                let v = value(&mut it, "--listen")?;
                args.listen = v
                    .parse()
                    .map_err(|_| format!("--listen {v:?}: not addr:port"))?;
            }
            "--upstream" => {
                let v = value(&mut it, "--upstream")?;
                let uri: Uri = v
                    .parse()
                    .map_err(|_| format!("--upstream {v:?}: not a URL"))?;
                if uri.scheme_str() != Some("http") || uri.authority().is_none() {
                    return Err(format!("--upstream {v:?}: expected http://host:port"));
                }
                upstream = Some(uri);
            }
            "--limit" => args.limits.push(value(&mut it, "--limit")?),
            "--trust" => {
                let v = value(&mut it, "--trust")?;
                args.trusted
                    .push(Net::parse(&v).ok_or(format!("--trust {v:?}: not a network"))?);
            }
            "--exempt-path" => args.exempt_paths.push(value(&mut it, "--exempt-path")?),
            "--shadow" => args.shadow = true,
            "--legacy-headers" => args.report = Report::Legacy,
            "--closest" => args.report = Report::Closest,
            other => {
                if !own(other, &mut it)? {
                    return Err(format!("unknown argument {other:?} (see --help)"));
                }
            }
        }
    }
    args.upstream = upstream.ok_or("--upstream is required (see --help)")?;
    Ok(args)
}

/// The value after the flag `name`.
pub fn value(it: &mut dyn Iterator<Item = String>, name: &str) -> Result<String, String> {
    it.next().ok_or(format!("{name} needs a value"))
}

/// Says, as `name`, where it listens and what it forwards to: the first line on stderr, which
/// scripts and tests read the address from. `more` ends the parenthesis (`, ...` or empty).
pub fn say_listening(name: &str, local: SocketAddr, args: &Args, more: &str) {
    eprintln!(
        "{name}: listening on {local} -> {} ({} limit(s){}{more})",
        args.upstream,
        args.limits.len(),
        if args.shadow { ", shadow" } else { "" },
    );
}

/// funnel's layer as the flags describe it, every `--limit` a policy; the clock is the
/// caller's (`build` or `build_with_clock`).
pub fn layer(args: &Args) -> Result<Builder, String> {
    let mut builder = RateLimitLayer::builder()
        .shadow(args.shadow)
        .report(args.report);
    for path in &args.exempt_paths {
        builder = builder.exempt_path(path.clone());
    }
    for spec in &args.limits {
        let p = parse_limit(spec, &args.trusted).map_err(|e| e.to_string())?;
        builder = builder.policy(p.name, p.key, p.quota);
    }
    Ok(builder)
}
