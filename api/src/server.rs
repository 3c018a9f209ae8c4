//! The `/api/v1` router: routes, bearer-token check, OpenAPI document, Swagger UI page.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::access::{ApiClient, AuditLog, Caller, Scope};
use crate::error::ApiError;
use crate::http::LocalAdmin;
use crate::management::Management;
use crate::models::*;
use crate::routes::{
    self, ana, cdc, compositions, controllers, drives, hosts, ports, subsystems, volumes,
};

#[derive(OpenApi)]
#[openapi(
    info(title = "fabrik management API", description = "Compose NVMe-oF drives to hosts. Mutations need `Authorization: Bearer <token>`; errors are RFC 9457 problem+json."),
    paths(
        drives::list, drives::get, drives::clear_fault, drives::set_qos,
        subsystems::list, subsystems::get, subsystems::create, subsystems::delete,
        subsystems::set_access, subsystems::set_authentication, subsystems::allow_host, subsystems::disallow_host,
        subsystems::namespaces, subsystems::add_namespace, subsystems::remove_namespace,
        hosts::list, hosts::get, hosts::create, hosts::delete, hosts::set_keys, hosts::set_qos,
        ports::list, ports::get, ports::create, ports::delete,
        controllers::list, controllers::get, controllers::disconnect,
        compositions::list, compositions::get, compositions::create, compositions::delete,
        volumes::list, volumes::get, volumes::create, volumes::delete, volumes::fail_member,
        volumes::add_spare, volumes::set_rebuild_limit, volumes::scrub,
        ana::list, ana::get, ana::set, ana::module, ana::set_module,
        ana::config, ana::apply_config, ana::push_config,
        cdc::registrations,
    ),
    components(schemas(Problem)),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI 3.1 document, as served at `/api/v1/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// Who may call what, and where changes are recorded (see `access`).
#[derive(Clone, Default)]
pub struct Auth {
    /// Every call over TCP needs `Authorization: Bearer <token>`: this one (admin), or a
    /// client's.
    pub token: String,
    /// Clients with tokens of their own and a scope.
    pub clients: Vec<ApiClient>,
    /// Every call that may change something is appended here.
    pub audit: Option<Arc<AuditLog>>,
}

impl Auth {
    /// The caller a request's credential names, if any.
    fn caller(&self, req: &Request) -> Option<Caller> {
        if req.extensions().get::<LocalAdmin>().is_some() {
            return Some(Caller {
                name: "local socket".into(),
                scope: Scope::Admin,
            });
        }
        if token_ok(req, &self.token) {
            return Some(Caller {
                name: "admin token".into(),
                scope: Scope::Admin,
            });
        }
        self.clients
            .iter()
            .find(|c| token_ok(req, &c.token))
            .map(|c| Caller {
                name: c.name.clone(),
                scope: c.scope,
            })
    }
}

/// The whole API under `/api/v1`, ready to serve (merge it with other routers freely) with
/// `http::serve_tcp` or `http::serve_unix`. Every call needs the token, except on the Unix
/// socket (`http::LocalAdmin`: its file permissions are the credential); the OpenAPI document
/// and the docs page are open (they hold nothing of the box).
pub fn router(m: Arc<dyn Management>, auth: Auth) -> Router {
    let protected = Router::new()
        .route("/drives", get(drives::list))
        .route("/drives/{id}", get(drives::get))
        .route("/drives/{id}/clear-fault", post(drives::clear_fault))
        .route("/drives/{id}/qos", put(drives::set_qos))
        .route(
            "/subsystems",
            get(subsystems::list).post(subsystems::create),
        )
        .route(
            "/subsystems/{nqn}",
            get(subsystems::get).delete(subsystems::delete),
        )
        .route("/subsystems/{nqn}/access", put(subsystems::set_access))
        .route(
            "/subsystems/{nqn}/authentication",
            put(subsystems::set_authentication),
        )
        .route("/subsystems/{nqn}/hosts", post(subsystems::allow_host))
        .route(
            "/subsystems/{nqn}/hosts/{host_nqn}",
            axum::routing::delete(subsystems::disallow_host),
        )
        .route(
            "/subsystems/{nqn}/namespaces",
            get(subsystems::namespaces).post(subsystems::add_namespace),
        )
        .route(
            "/subsystems/{nqn}/namespaces/{nsid}",
            axum::routing::delete(subsystems::remove_namespace),
        )
        .route("/hosts", get(hosts::list).post(hosts::create))
        .route("/hosts/{nqn}", get(hosts::get).delete(hosts::delete))
        .route("/hosts/{nqn}/keys", put(hosts::set_keys))
        .route("/hosts/{nqn}/qos", put(hosts::set_qos))
        .route("/ports", get(ports::list).post(ports::create))
        .route("/ports/{id}", get(ports::get).delete(ports::delete))
        .route("/ana-groups", get(ana::list))
        .route("/cdc/registrations", get(cdc::registrations))
        .route("/ana-groups/{id}", get(ana::get).put(ana::set))
        .route("/module", get(ana::module).put(ana::set_module))
        .route("/module/config", get(ana::config).put(ana::apply_config))
        .route("/module/config/push", post(ana::push_config))
        .route("/controllers", get(controllers::list))
        .route("/controllers/{id}", get(controllers::get))
        .route(
            "/controllers/{id}/disconnect",
            post(controllers::disconnect),
        )
        .route(
            "/compositions",
            get(compositions::list).post(compositions::create),
        )
        .route(
            "/compositions/{id}",
            get(compositions::get).delete(compositions::delete),
        )
        .route("/volumes", get(volumes::list).post(volumes::create))
        .route("/volumes/{name}", get(volumes::get).delete(volumes::delete))
        .route(
            "/volumes/{name}/members/{drive}/fail",
            post(volumes::fail_member),
        )
        .route("/volumes/{name}/spares", post(volumes::add_spare))
        .route(
            "/volumes/{name}/rebuild-limit",
            put(volumes::set_rebuild_limit),
        )
        .route("/volumes/{name}/scrub", post(volumes::scrub))
        .with_state(m as routes::Mgmt)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(auth),
            check_token,
        ));
    let api = Router::new()
        .route("/openapi.json", get(|| async { Json(openapi()) }))
        .route("/docs", get(docs_page))
        .merge(protected)
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, crate::error::NO_SUCH_ROUTE) })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "this resource does not take that method",
            )
        });
    with_swagger_ui(Router::new().nest("/api/v1", api))
}

/// Swagger UI at /api/v1/swagger-ui/, every asset from the binary. The validator badge is off:
/// it would send the document to validator.swagger.io, which an offline network cannot reach.
fn with_swagger_ui(app: Router) -> Router {
    app.merge(
        utoipa_swagger_ui::SwaggerUi::new("/api/v1/swagger-ui")
            .config(utoipa_swagger_ui::Config::from("/api/v1/openapi.json").validator_url("none")),
    )
}

fn token_ok(req: &Request, token: &str) -> bool {
    bearer_ok(req.headers(), token)
}

/// `Authorization: Bearer <token>` with exactly this token.
pub(crate) fn bearer_ok(headers: &axum::http::HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    // Constant time in the token's content: no timing hint about how much matched.
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The request's path as the client sent it (a nested router sees only its own part).
fn full_path(req: &Request) -> String {
    match req.extensions().get::<axum::extract::OriginalUri>() {
        Some(uri) => uri.path().to_string(),
        None => req.uri().path().to_string(),
    }
}

async fn check_token(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    if let Some(caller) = auth.caller(&req) {
        let method = req.method().clone();
        let path = full_path(&req);
        let resp = if caller.scope.allows(&method) {
            req.extensions_mut().insert(caller.clone());
            next.run(req).await
        } else {
            ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "this token is read-only (client {:?}): it may only GET",
                    caller.name
                ),
            )
            .into_response()
        };
        if let Some(audit) = auth.audit.clone().filter(|_| !Scope::Read.allows(&method)) {
            let status = resp.status().as_u16();
            // Durable before the answer goes out; off the reactor (an fsync).
            let _ = tokio::task::spawn_blocking(move || {
                audit.record(&caller.name, &method, &path, status)
            })
            .await;
        }
        return resp;
    }
    let mut resp = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "every call needs Authorization: Bearer <token> (the api-token file in fabrikd's data \
         directory), or fabrikd's local socket (api.sock in its data directory)",
    )
    .into_response();
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, "Bearer".parse().unwrap());
    // A change tried without a credential is recorded too.
    let method = req.method().clone();
    if let Some(audit) = auth.audit.clone().filter(|_| !Scope::Read.allows(&method)) {
        let path = full_path(&req);
        let _ = tokio::task::spawn_blocking(move || {
            audit.record("(no valid token)", &method, &path, 401)
        })
        .await;
    }
    resp
}

async fn docs_page() -> impl IntoResponse {
    axum::response::Redirect::to("/api/v1/swagger-ui/")
}
