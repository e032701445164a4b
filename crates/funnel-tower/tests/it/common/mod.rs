//! What funnel-tower's tests share: a loopback server around a layer, the example proxy as a
//! process ([`proxy`]), a real HTTP client that can send from any 127.0.0.0/8 address, and the draft's header fields read with an RFC 8941 /
//! RFC 9651 structured-field parser (`sfv`), not by hand.

pub mod proxy;

use std::convert::Infallible;
use std::future::Ready;
use std::net::{IpAddr, SocketAddr};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use funnel_tower::{PeerAddr, RateLimitLayer};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower_layer::Layer;

/// The upstream: answers 200 "ok".
#[derive(Clone)]
pub struct Ok200;

impl<B> tower_service::Service<Request<B>> for Ok200 {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<B>) -> Self::Future {
        std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"ok")))))
    }
}

/// Serves `layer` around [`Ok200`] on a free loopback port, inserting each connection's
/// [`PeerAddr`].
pub async fn serve<C>(layer: RateLimitLayer<C>) -> SocketAddr
where
    C: funnel::Clock + Clone + Send + Sync + 'static,
{
    serve_with(layer, true).await
}

/// As [`serve`]; without `PeerAddr` when `with_peer` is false (a server that forgot it).
pub async fn serve_with<C>(layer: RateLimitLayer<C>, with_peer: bool) -> SocketAddr
where
    C: funnel::Clock + Clone + Send + Sync + 'static,
{
    let limited = layer.layer(Ok200);
    serve_each(move |peer| {
        let limited = limited.clone();
        hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
            if with_peer {
                req.extensions_mut().insert(PeerAddr(peer));
            }
            let mut s = limited.clone();
            async move { tower_service::Service::call(&mut s, req).await }
        })
    })
    .await
}

/// Serves HTTP/1 on a free loopback port, each connection with the service `service` makes
/// for its peer's address; the address served.
pub async fn serve_each<F, S, B>(service: F) -> SocketAddr
where
    F: Fn(SocketAddr) -> S + Send + 'static,
    S: hyper::service::Service<Request<hyper::body::Incoming>, Response = Response<B>>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let svc = service(peer);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// A response, read whole.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().expect("ASCII"))
    }
}

/// A client whose connections come from `from` (any 127.0.0.0/8 address is this machine).
pub fn client_from(from: Option<IpAddr>) -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(from);
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// Sends `req` and reads the whole reply, with a time limit.
pub async fn send(client: &Client<HttpConnector, Full<Bytes>>, req: Request<Full<Bytes>>) -> Reply {
    let res = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("an answer within 10 s")
        .expect("a response");
    let (parts, body) = res.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .expect("a body within 10 s")
        .expect("a body")
        .to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).expect("a UTF-8 body"),
    }
}

/// A GET request with raw header values (any bytes a header may carry).
pub fn request(addr: SocketAddr, path: &str, headers: &[(&str, &[u8])]) -> Request<Full<Bytes>> {
    let mut b = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(
            *k,
            HeaderValue::from_bytes(v).expect("a valid header value"),
        );
    }
    b.body(Full::new(Bytes::new())).unwrap()
}

/// GET `path` from 127.0.0.1.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &[u8])]) -> Reply {
    send(&client_from(None), request(addr, path, headers)).await
}

/// GET `path` from the loopback address `from` (e.g. 127.0.0.7).
pub async fn get_from(addr: SocketAddr, from: &str, path: &str) -> Reply {
    let from: IpAddr = from.parse().unwrap();
    send(&client_from(Some(from)), request(addr, path, &[])).await
}

/// One member of a `RateLimit-Policy` or `RateLimit` list: a policy name and its integer
/// parameters, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub params: Vec<(String, i64)>,
}

impl Member {
    /// A parameter's value; panics when it is missing.
    pub fn get(&self, key: &str) -> i64 {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("{} has no {key}: {self:?}", self.name))
            .1
    }
}

/// Parses a field value as the draft defines both fields: an sf-list whose members are items
/// (not inner lists), each an sf-string naming a policy, with integer parameters. Panics,
/// naming the value, on anything else.
pub fn sf_list(value: &str) -> Vec<Member> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not an RFC 9651 list: {e}"));
    list.into_iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("{value:?}: an inner list where an item belongs");
            };
            let name = item
                .bare_item
                .as_string()
                .unwrap_or_else(|| panic!("{value:?}: a policy name must be an sf-string"))
                .as_str()
                .to_string();
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    let int = v
                        .as_integer()
                        .unwrap_or_else(|| panic!("{value:?}: {} is not an integer", k.as_str()));
                    (k.as_str().to_string(), i64::from(int))
                })
                .collect();
            Member { name, params }
        })
        .collect()
}

/// A reply's field, parsed; panics when absent.
pub fn field(r: &Reply, name: &str) -> Vec<Member> {
    let values: Vec<&str> = r
        .headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().expect("ASCII"))
        .collect();
    assert!(!values.is_empty(), "no {name} header");
    // Several field lines are one list (RFC 9110 5.3).
    sf_list(&values.join(", "))
}

/// The member of `list` named `policy`; panics when absent.
pub fn member<'a>(list: &'a [Member], policy: &str) -> &'a Member {
    list.iter()
        .find(|m| m.name == policy)
        .unwrap_or_else(|| panic!("no policy {policy:?} in {list:?}"))
}

/// Checks a reply's draft fields for what every reply must satisfy, and returns them:
/// both fields parse; they name the same policies in the same order; `q` and `w` are positive
/// and `RateLimit-Policy` has nothing else; `r` is within `0..q` and `t` is present and not
/// negative; on a reply with `Retry-After`, that is an integer and the denying policy's `t`
/// equals it.
pub fn draft_fields(r: &Reply) -> (Vec<Member>, Vec<Member>) {
    let policy = field(r, "ratelimit-policy");
    let state = field(r, "ratelimit");
    let names = |l: &[Member]| l.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&policy),
        names(&state),
        "the two fields name other policies"
    );
    for (p, s) in policy.iter().zip(&state) {
        let keys: Vec<&str> = p.params.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["q", "w"], "{p:?}");
        let keys: Vec<&str> = s.params.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["r", "t"], "{s:?}");
        assert!(p.get("q") > 0 && p.get("w") > 0, "{p:?}");
        assert!(
            (0..=p.get("q")).contains(&s.get("r")),
            "{s:?} against {p:?}"
        );
        assert!(s.get("t") >= 0, "{s:?}");
    }
    if let Some(retry) = r.header("retry-after") {
        let retry: i64 = retry.parse().expect("Retry-After in whole seconds");
        assert!(
            state.iter().any(|s| s.get("t") == retry),
            "no policy's t is the Retry-After {retry}: {state:?}"
        );
    }
    (policy, state)
}
