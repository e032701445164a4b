//! The forwarding half of the example proxy, shared with the lab's load-test proxy
//! (`crates/lab/examples/loadtest_proxy.rs` includes this file, so that every row of the load
//! test forwards with the same code): the upstream client as a service, and the accept loop
//! that serves each connection with a service of the caller's until told to stop.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};

pub type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Forwards a request to the upstream, keeping method, path, query and headers; answers with
/// the body type `B` (the proxy's own: [`ProxyBody`]; a layer around it may want another).
pub struct Forward<B> {
    client: Client<HttpConnector, Incoming>,
    upstream: Uri,
    body: fn(ProxyBody) -> B,
}

impl<B> Forward<B> {
    /// Forwards to `upstream` (`http://host:port`), each answer's body passed through `body`
    /// (`std::convert::identity` keeps [`ProxyBody`]).
    pub fn new(upstream: Uri, body: fn(ProxyBody) -> B) -> Forward<B> {
        let mut connector = HttpConnector::new();
        // TCP_NODELAY, as on the accepted side: a request written in more than one segment
        // would otherwise wait for the upstream's delayed acknowledgement.
        connector.set_nodelay(true);
        Forward {
            client: Client::builder(TokioExecutor::new()).build(connector),
            upstream,
            body,
        }
    }
}

/// Not derived: a derive would ask `B: Clone`, and the body is made, not kept.
impl<B> Clone for Forward<B> {
    fn clone(&self) -> Self {
        Forward {
            client: self.client.clone(),
            upstream: self.upstream.clone(),
            body: self.body,
        }
    }
}

impl<B: Send + 'static> tower_service::Service<Request<Incoming>> for Forward<B> {
    type Response = Response<B>;
    type Error = Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let (mut parts, body) = req.into_parts();
        // Only a path is forwarded: `OPTIONS *` and `CONNECT host:port` name no resource of
        // the upstream, and the client's error, not the upstream's (a 400, not a 502).
        let path = match parts.uri.path_and_query() {
            Some(p) if p.as_str().starts_with('/') => Some(p.as_str()),
            _ if parts.uri.scheme().is_some() => Some("/"), // `http://host` without a path
            _ => None,
        };
        let uri = path.map(|path| {
            format!(
                "http://{}{}",
                self.upstream.authority().map_or("", |a| a.as_str()),
                path
            )
        });
        let (client, answer) = (self.client.clone(), self.body);
        Box::pin(async move {
            match uri.map(|u| u.parse()) {
                Some(Ok(uri)) => parts.uri = uri,
                _ => return Ok(status(StatusCode::BAD_REQUEST).map(answer)),
            }
            let resp = match client.request(Request::from_parts(parts, body)).await {
                Ok(resp) => resp.map(|b| b.boxed()),
                Err(_) => status(StatusCode::BAD_GATEWAY),
            };
            Ok(resp.map(answer))
        })
    }
}

fn status(code: StatusCode) -> Response<ProxyBody> {
    let mut r = Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = code;
    r
}

/// Says `e` as `name` and exits 2: how both binaries refuse a command line.
pub fn refuse(name: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("{name}: {e}");
    std::process::exit(2)
}

/// Listens on `listen`, or says why not (as `name`) and exits 1.
pub async fn bind(name: &str, listen: SocketAddr) -> TcpListener {
    match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{name}: cannot listen on {listen}: {e}");
            std::process::exit(1);
        }
    }
}

/// Accepts connections until `stop` resolves, each given to `each` with its peer's address and
/// a [`Watcher`] for [`serve`]; then closes the listener, so that a new connection is refused
/// rather than left unanswered, and returns the connections still open, to be drained
/// ([`GracefulShutdown::shutdown`]) or cut (dropped).
pub async fn accept(
    name: &str,
    listener: TcpListener,
    stop: impl Future<Output = ()>,
    mut each: impl FnMut(TokioIo<TcpStream>, SocketAddr, Watcher),
) -> GracefulShutdown {
    let open = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            // Biased: once `stop` has resolved, no more connection is taken from the backlog.
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors (or another transient error): retrying at once
                // would spin a core until a connection closes.
                eprintln!("{name}: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        each(TokioIo::new(stream), peer, open.watcher());
    }
    drop(listener);
    open
}

/// Serves one connection with `svc`, cloned for each request after `tag` has marked it, until
/// the client closes it or, once `watcher`'s shutdown has begun, its request in flight (if
/// any) is answered: an idle keep-alive connection closes at once.
pub async fn serve<S, B>(
    io: TokioIo<TcpStream>,
    svc: S,
    tag: impl Fn(&mut Request<Incoming>) + Clone + Send + 'static,
    watcher: Watcher,
) where
    S: tower_service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        tag(&mut req);
        let mut svc = svc.clone();
        async move { tower_service::Service::call(&mut svc, req).await }
    });
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, svc);
    let _ = watcher.watch(connection).await;
}
