//! The gRPC service `envoy.service.ratelimit.v3.RateLimitService`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::decide::Decider;
use crate::proto::rate_limit_service_server::RateLimitService;
use crate::proto::{RateLimitRequest, RateLimitResponse};

/// `ShouldRateLimit` over a [`Decider`].
#[derive(Clone)]
pub struct Service {
    decider: Arc<Decider>,
}

impl Service {
    /// The service deciding with `decider`.
    pub fn new(decider: Arc<Decider>) -> Service {
        Service { decider }
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        match self.decider.decide(request.get_ref()).await {
            Ok(r) => Ok(Response::new(r)),
            Err(e) => Err(Status::invalid_argument(e.0)),
        }
    }
}
