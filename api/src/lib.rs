//! fabrik-api: fabrik's management models and REST API, shared by `fabrikd` and fabrik's tools:
//! the configuration file schema, the REST resources, the `/api/v1` router (served by fabrikd
//! over a `Management` implementation) and a typed client.

pub mod access;
pub mod client;
pub mod config;
pub mod error;
pub mod http;
pub mod management;
pub mod metrics;
pub mod models;
pub mod routes;
pub mod server;
pub mod tls;

pub use management::{Management, MgmtError, MgmtResult};
pub use server::{openapi, router, Auth};

/// The HTTP framework the router is made with, for merging routes into it.
pub use axum;

/// Serves `app` on `listener` until `stop` completes, within the default `http::Limits`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    http::serve_tcp(listener, app, http::Limits::default(), stop).await
}
