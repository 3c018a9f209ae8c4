//! The management REST API against an in-process fabrikd: reads of every resource, errors as
//! problems, the token, the OpenAPI document, controllers and ports changed live. Compositions,
//! subsystems and namespaces: api_compose.rs.

mod common;
mod metrics_scrape;

use std::net::SocketAddr;
use std::time::Duration;

use common::api::*;
use fabrik_api::client::Client;
use fabrik_api::models::*;
use fabrik_initiator::{discover, HostIdentity};
use fabrik_target::metrics::MetricsEndpoint;
use metrics_scrape::{parse, scrape, scrape_with, value, Sample};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_resources() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let c = &api.local; // the local socket needs no token

    let drives = c.drives().await.unwrap();
    assert_eq!(
        drives.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["00", "01", "02", "03"]
    );
    let d = c.drive("02").await.unwrap();
    assert_eq!(
        (d.slot, d.backend.as_str(), d.capacity_bytes, d.block_size),
        (2, "ram", 16 * MIB, 4096)
    );
    assert_eq!(d.subsystems, vec![nqn("02")]);
    assert_eq!(d.hosts, None, "any host by default");
    assert_eq!(d.health.state, "ok");
    assert_eq!(
        (d.health.source.as_str(), d.health.temperature_celsius),
        ("fabrikd", None),
        "RAM drives have no SMART log"
    );
    assert_problem(c.drive("99").await, 404, "99");

    let subs = c.subsystems().await.unwrap();
    assert_eq!(subs.len(), 4);
    let s = c.subsystem(&nqn("01")).await.unwrap();
    assert!(s.allow_any_host);
    assert_eq!(s.namespaces.len(), 1);
    assert_eq!(
        (s.namespaces[0].nsid, s.namespaces[0].drive.as_str()),
        (1, "01")
    );
    assert_eq!(s.namespaces[0].nguid.len(), 32);
    assert_eq!(s.ports, vec![1]);
    assert_problem(c.subsystem("nqn.2024-01.io.fabrik:nope").await, 404, "nope");
    let ns: Vec<Namespace> = c
        .get(&format!("/subsystems/{}/namespaces", nqn("01")))
        .await
        .unwrap();
    assert_eq!(ns, s.namespaces);

    let ports = c.ports().await.unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!((ports[0].id, ports[0].transport.as_str()), (1, "tcp"));
    assert_eq!(ports[0].service_id, api.nvme().port());
    assert_problem(c.get::<Port>("/ports/7").await, 404, "7");
    assert_problem(c.get::<Port>("/ports/x").await, 400, "");

    assert!(c.hosts().await.unwrap().is_empty());
    assert!(c.compositions().await.unwrap().is_empty());
    assert!(c.controllers().await.unwrap().is_empty());

    // I/O shows in the drive's counters.
    let host = HostIdentity::random();
    let ctrl = connect(api.nvme(), &nqn("02"), &host).await.unwrap();
    ctrl.write(1, 0, common::random_data(8192, 1), false)
        .await
        .unwrap();
    ctrl.read(1, 0, 2).await.unwrap();
    let h = c.drive("02").await.unwrap().health;
    assert_eq!(
        (
            h.write_commands,
            h.read_commands,
            h.bytes_written,
            h.bytes_read
        ),
        (1, 1, 8192, 8192)
    );
    let ctrls = c.controllers().await.unwrap();
    assert_eq!(ctrls.len(), 1);
    assert_eq!(ctrls[0].host_nqn.as_ref(), Some(&host.nqn));
    assert_eq!(ctrls[0].subsystem, nqn("02"));
    assert_eq!(ctrls[0].io_queues, ctrl.io_queue_count() as u32);
    assert!(ctrls[0].keep_alive_ms > 0);
    assert_eq!(c.controller(ctrls[0].id).await.unwrap(), ctrls[0]);
    assert!(
        c.hosts().await.unwrap().is_empty(),
        "a host on no list is not a known host"
    );
    ctrl.shutdown().await.unwrap();
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_problems_and_changes_need_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let req = CompositionRequest {
        host_nqn: HostIdentity::random().nqn,
        drives: vec!["00".into()],
        ports: None,
        shared: false,
    };
    assert_problem(api.anon.compose(&req).await, 401, "Bearer");
    let wrong = Client::new(&format!("http://{}", api.api), Some("wrong".into()));
    assert_problem(wrong.compose(&req).await, 401, "Bearer");
    assert_problem(api.anon.decompose("c1").await, 401, "Bearer");
    assert!(
        api.admin.compositions().await.unwrap().is_empty(),
        "nothing was composed"
    );

    let (status, ctype, body) = raw(api.api, "GET", "/api/v1/drives/nope", None).await;
    assert_eq!((status, ctype.as_str()), (404, "application/problem+json"));
    let p: Problem = serde_json::from_str(&body).unwrap();
    assert_eq!((p.status, p.title.as_str()), (404, "Not Found"));
    let (status, ctype, _) = raw(api.api, "GET", "/api/v1/no-such-thing", None).await;
    assert_eq!((status, ctype.as_str()), (404, "application/problem+json"));
    let (status, ctype, _) = raw(api.api, "PATCH", "/api/v1/drives", None).await;
    assert_eq!((status, ctype.as_str()), (405, "application/problem+json"));
    let (status, ctype, body) = raw(
        api.api,
        "POST",
        "/api/v1/compositions",
        Some(("application/json", "{\"host_nqn\": ")),
    )
    .await;
    assert_eq!(
        (status, ctype.as_str()),
        (400, "application/problem+json"),
        "{body}"
    );
    let (status, _, body) = raw(
        api.api,
        "POST",
        "/api/v1/compositions",
        Some(("application/json", "{\"host\": 1}")),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("host"), "{body}");
    // Every body is a JSON object: serde would fill a struct from an array of its fields in
    // order, and schemathesis found `[true]` accepted as `{"allow_any_host": true}`.
    let access = format!(
        "/api/v1/subsystems/{}/access",
        nqn("00").replace(':', "%3A")
    );
    for (path, method, array) in [
        (access.as_str(), "PUT", "[false]"),
        (
            "/api/v1/compositions",
            "POST",
            "[\"nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000009\", [\"00\"]]",
        ),
    ] {
        let (status, ctype, body) =
            raw(api.api, method, path, Some(("application/json", array))).await;
        assert_eq!(
            (status, ctype.as_str()),
            (422, "application/problem+json"),
            "{path}: {body}"
        );
        assert!(body.contains("JSON object"), "{body}");
    }
    let sub = api.local.subsystem(&nqn("00")).await.unwrap();
    assert!(sub.allow_any_host, "the refused change left no trace");
    let (status, _, _) = raw(
        api.api,
        "POST",
        "/api/v1/compositions",
        Some(("text/plain", "{}")),
    )
    .await;
    assert_eq!(status, 415);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_lists_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    // Open without a token: it holds nothing of the box.
    let doc: serde_json::Value = api.anon.get("/openapi.json").await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/api/v1/drives",
        "/api/v1/drives/{id}",
        "/api/v1/subsystems/{nqn}/namespaces/{nsid}",
        "/api/v1/subsystems/{nqn}/hosts/{host_nqn}",
        "/api/v1/hosts/{nqn}",
        "/api/v1/ports/{id}",
        "/api/v1/controllers/{id}/disconnect",
        "/api/v1/compositions/{id}",
        "/api/v1/ana-groups/{id}",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["components"]["schemas"]["Problem"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    api.stop().await;
}

/// GET `path` over plain HTTP without a token: (status, Location header, body bytes).
async fn http_get(api: std::net::SocketAddr, path: &str) -> (u16, String, Vec<u8>) {
    http_get_as(api, path, "localhost").await
}

/// The same, naming the server `host` in the Host header.
async fn http_get_as(api: std::net::SocketAddr, path: &str, host: &str) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(api).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&out[..split]).to_string();
    let location = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("location: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (
        head[9..12].parse().unwrap(),
        location,
        out[split + 4..].to_vec(),
    )
}

/// Over TCP every call needs the token, reads too, whatever the peer or Host header: host
/// NQNs are credentials until DH-HMAC-CHAP. The local socket needs none: it is 0600, so only
/// fabrikd's user (and root) can reach it. The OpenAPI document stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_calls_need_the_token_and_the_local_socket_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let port = api.api.port();
    for host in [
        "localhost".to_string(),
        format!("127.0.0.1:{port}"),
        "attacker.example".into(),
    ] {
        for path in [
            "/api/v1/drives",
            "/api/v1/hosts",
            "/api/v1/controllers",
            "/metrics",
        ] {
            let (status, _, body) = http_get_as(api.api, path, &host).await;
            assert_eq!(status, 401, "GET {path} with Host: {host}");
            assert!(!String::from_utf8_lossy(&body).contains("nqn."), "{path}");
        }
    }
    assert_problem(api.anon.hosts().await, 401, "Bearer <token>");
    let (status, _, _) = http_get(api.api, "/api/v1/openapi.json").await;
    assert_eq!(status, 200, "the OpenAPI document is open");
    assert_eq!(api.admin.drives().await.unwrap().len(), 4);

    let socket = dir.path().join("api.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the local socket is its owner's alone");
    assert_eq!(api.local.drives().await.unwrap().len(), 4);
    let host = HostIdentity::random();
    let made: Host = api
        .local
        .post(
            "/hosts",
            &HostRequest {
                nqn: host.nqn.clone(),
                name: None,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(made.nqn, host.nqn);
    api.stop().await;
    assert!(!socket.exists(), "the socket file goes with fabrikd");
}

/// The docs page works on an offline management network: Swagger UI comes from fabrikd itself,
/// every asset the page loads is served, and nothing names another host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_page_needs_nothing_from_the_internet() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let (status, location, _) = http_get(api.api, "/api/v1/docs").await;
    assert!((300..400).contains(&status), "{status}");
    let base = "/api/v1/swagger-ui/";
    assert_eq!(location, base);
    let (status, _, page) = http_get(api.api, base).await;
    assert_eq!(status, 200);
    let page = String::from_utf8(page).unwrap();
    let mut assets = Vec::new();
    for attr in ["src=\"", "href=\""] {
        for part in page.split(attr).skip(1) {
            assets.push(part.split('"').next().unwrap().to_string());
        }
    }
    assert!(
        assets.iter().any(|a| a.ends_with("swagger-ui-bundle.js")),
        "{page}"
    );
    for asset in &assets {
        assert!(
            !asset.contains("//") && !asset.contains(':'),
            "{asset} is not served by fabrikd: {page}"
        );
        let path = format!("{base}{}", asset.trim_start_matches("./"));
        let (status, _, body) = http_get(api.api, &path).await;
        assert_eq!(status, 200, "{path}");
        assert!(!body.is_empty(), "{path}");
        if path.ends_with(".css") {
            let css = String::from_utf8_lossy(&body);
            assert!(
                !css.contains("url(http") && !css.contains("@import"),
                "{path}"
            );
        }
    }
    let (status, _, init) = http_get(api.api, &format!("{base}swagger-initializer.js")).await;
    assert_eq!(status, 200);
    let init = String::from_utf8(init).unwrap();
    assert!(init.contains("\"/api/v1/openapi.json\""), "{init}");
    assert!(
        init.contains("\"validatorUrl\": \"none\""),
        "no validator badge from validator.swagger.io: {init}"
    );
    assert!(
        !init.contains("http://") && !init.contains("https://"),
        "{init}"
    );
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "{page}"
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_closes_the_controller() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let host = HostIdentity::random();
    let ctrl = connect(api.nvme(), &nqn("01"), &host).await.unwrap();
    let id = api.admin.controllers().await.unwrap()[0].id;
    assert_problem(api.anon.disconnect_controller(id).await, 401, "Bearer");
    api.admin.disconnect_controller(id).await.unwrap();
    assert!(
        ctrl.read(1, 0, 1).await.is_err(),
        "the connection is closed"
    );
    assert!(api.admin.controllers().await.unwrap().is_empty());
    assert_problem(
        api.admin.disconnect_controller(id).await,
        404,
        "no live controller",
    );
    // Still allowed: the host may come back.
    connect_and_close(api.nvme(), &nqn("01"), &host).await;
    api.stop().await;
}

/// The ANA group's state set through REST: hosts' I/O on the path gets the path-related status
/// while it is inaccessible, and goes on once it is optimized again; bad calls are problems.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ana_group_state_is_set_through_rest_and_gates_io() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let groups = api.local.ana_groups().await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(
        (groups[0].id, groups[0].state, groups[0].change_count),
        (1, AnaState::Optimized, 0)
    );
    let ctrl = connect(api.nvme(), &nqn("01"), &HostIdentity::random())
        .await
        .unwrap();
    ctrl.read(1, 0, 1).await.unwrap();

    assert_problem(
        api.anon.set_ana_group(1, AnaState::Inaccessible).await,
        401,
        "Bearer",
    );
    let g = api
        .admin
        .set_ana_group(1, AnaState::Inaccessible)
        .await
        .unwrap();
    assert_eq!((g.state, g.change_count), (AnaState::Inaccessible, 1));
    let err = ctrl.read(1, 0, 1).await.unwrap_err();
    assert_eq!(err.status(), Some(fabrik_proto::Status::ANA_INACCESSIBLE));
    let g: AnaGroup = api.local.get("/ana-groups/1").await.unwrap();
    assert_eq!(g.state, AnaState::Inaccessible);
    let (_, text) = scrape_with(api.api, None, Some(TOKEN)).await;
    let samples = parse(&text);
    let state = |s| {
        value(
            &samples,
            "fabrik_ana_group_state",
            &[("group", "1"), ("state", s)],
        )
    };
    assert_eq!((state("inaccessible"), state("optimized")), (1.0, 0.0));
    assert_eq!(
        value(
            &samples,
            "fabrik_ana_group_changes_total",
            &[("group", "1")]
        ),
        1.0
    );

    let g = api
        .admin
        .set_ana_group(1, AnaState::Optimized)
        .await
        .unwrap();
    assert_eq!((g.state, g.change_count), (AnaState::Optimized, 2));
    ctrl.read(1, 0, 1).await.unwrap();

    assert_problem(
        api.admin.set_ana_group(2, AnaState::Optimized).await,
        404,
        "no ANA group 2",
    );
    assert_problem(api.local.get::<AnaGroup>("/ana-groups/x").await, 400, "");
    let (status, ctype, body) = raw(
        api.api,
        "PUT",
        "/api/v1/ana-groups/1",
        Some(("application/json", r#"{"state": "sleepy"}"#)),
    )
    .await;
    assert_eq!((status, ctype.as_str()), (422, "application/problem+json"));
    assert!(body.contains("sleepy"), "says what was wrong: {body}");

    // A state set is kept across a restart; optimized leaves nothing in the state file.
    api.admin
        .set_ana_group(1, AnaState::Inaccessible)
        .await
        .unwrap();
    drop(ctrl);
    api.stop().await;
    let api = start(dir.path()).await;
    let g = &api.local.ana_groups().await.unwrap()[0];
    assert_eq!(g.state, AnaState::Inaccessible, "kept across the restart");
    api.admin
        .set_ana_group(1, AnaState::Optimized)
        .await
        .unwrap();
    let file = std::fs::read_to_string(dir.path().join("state.json")).unwrap();
    assert!(!file.contains("ana_state"), "{file}");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_are_added_and_removed_live() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let m = &api.admin;
    let req = |address: &str, service_id| PortRequest {
        transport: None,
        address: address.into(),
        service_id,
        tls: None,
    };
    let p: Port = m.post("/ports", &req("127.0.0.1", 0)).await.unwrap();
    assert_eq!((p.id, p.transport.as_str()), (2, "tcp"));
    assert_ne!(p.service_id, 0, "port 0 picks a free port");
    let second: SocketAddr = format!("127.0.0.1:{}", p.service_id).parse().unwrap();

    // The new port serves I/O and shows in discovery.
    let host = HostIdentity::random();
    let ctrl = connect(second, &nqn("01"), &host).await.unwrap();
    let data = common::random_data(4096, 9);
    ctrl.write(1, 3, data.clone(), false).await.unwrap();
    common::assert_same_data(&ctrl.read(1, 3, 1).await.unwrap(), &data, "through port 2");
    assert_eq!(m.port(2).await.unwrap().controllers, 1);
    let log = discover(second, &host.nqn).await.unwrap();
    assert!(log
        .entries
        .iter()
        .any(|e| e.trsvcid == p.service_id.to_string()));

    // Errors: exists, in use (by port 1 here), bad address, unknown transport; nothing changes.
    assert_problem(
        m.post::<Port>("/ports", &req("127.0.0.1", p.service_id))
            .await,
        409,
        "exists",
    );
    let used = api.nvme();
    assert_problem(
        m.post::<Port>("/ports", &req("127.0.0.1", used.port()))
            .await,
        409,
        "in use",
    );
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let busy = taken.local_addr().unwrap().port();
    assert_problem(
        m.post::<Port>("/ports", &req("127.0.0.1", busy)).await,
        409,
        "in use",
    );
    assert_problem(
        m.post::<Port>("/ports", &req("localhost", 1)).await,
        422,
        "IP address",
    );
    let mut rdma = req("127.0.0.1", 0);
    rdma.transport = Some("carrier-pigeon".into());
    assert_problem(m.post::<Port>("/ports", &rdma).await, 422, "transport");
    assert_eq!(m.ports().await.unwrap().len(), 2);

    // Removing it closes its connections; port 1 is the last and stays.
    m.delete("/ports/2").await.unwrap();
    let mut gone = false;
    for _ in 0..50 {
        if ctrl.read(1, 3, 1).await.is_err() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the connection through the removed port is closed");
    assert!(
        tokio::net::TcpStream::connect(second).await.is_err(),
        "nothing listens there"
    );
    assert_problem(m.delete("/ports/2").await, 404, "no port 2");
    assert_problem(m.delete("/ports/1").await, 409, "last port");
    let log = discover(api.nvme(), &host.nqn).await.unwrap();
    assert!(log.entries.iter().all(|e| e.portid == 1));
    api.stop().await;
}

/// Fields past what the Linux target allows are refused, with what the limit is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_names_and_models_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let m = &api.admin;
    let sub = |model: String| SubsystemRequest {
        nqn: None,
        name: Some("limits".into()),
        drives: vec![],
        hosts: vec![],
        allow_any_host: true,
        model: Some(model),
    };
    assert_problem(
        m.post::<Subsystem>("/subsystems", &sub("m".repeat(41)))
            .await,
        422,
        "at most 40 printable ASCII",
    );
    assert_problem(
        m.post::<Subsystem>("/subsystems", &sub("tab\there".into()))
            .await,
        422,
        "printable",
    );
    let made: Subsystem = m.post("/subsystems", &sub("m".repeat(40))).await.unwrap();
    assert_eq!(made.model, "m".repeat(40));
    let host = |name: String| HostRequest {
        nqn: HostIdentity::random().nqn,
        name: Some(name),
        ..Default::default()
    };
    assert_problem(
        m.post::<Host>("/hosts", &host("n".repeat(65))).await,
        422,
        "at most 64 characters",
    );
    let _: Host = m
        .post("/hosts", &host("gpu-7 (rack 3)".into()))
        .await
        .unwrap();
    api.stop().await;
}

/// A deleted port stops serving, always: a port added while a deleted one still drains its
/// connections gets an ID of its own (it once got the draining port's, and its DELETE then
/// stopped that one instead, while it went on serving).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_added_again_after_a_delete_stops_serving_when_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let m = &api.admin;
    let req = |service_id| PortRequest {
        transport: None,
        address: "127.0.0.1".into(),
        service_id,
        tls: None,
    };
    let stops_serving = |addr: SocketAddr, what: String| async move {
        let start = std::time::Instant::now();
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "{what} still accepts connections after its DELETE"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    for round in 0..3 {
        let p: Port = m.post("/ports", &req(0)).await.unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", p.service_id).parse().unwrap();
        // A connection that stays open across the DELETE (it never closes its side: the port
        // waits for it up to 2 s), so the port still drains at the next POST.
        let lingering =
            common::raw::RawConn::connect(addr, fabrik_proto::tcp::Digests::default()).await;
        m.delete(&format!("/ports/{}", p.id)).await.unwrap();
        stops_serving(addr, format!("round {round}: port {}", p.id)).await;
        // The same address again: free, and a new ID while the old port drains.
        let again: Port = m.post("/ports", &req(p.service_id)).await.unwrap();
        assert_ne!(again.id, p.id, "round {round}: a draining port's ID reused");
        connect(addr, &nqn("01"), &HostIdentity::random())
            .await
            .unwrap()
            .shutdown()
            .await
            .unwrap();
        m.delete(&format!("/ports/{}", again.id)).await.unwrap();
        stops_serving(
            addr,
            format!("round {round}: port {} (added again)", again.id),
        )
        .await;
        assert!(m.ports().await.unwrap().iter().all(|q| q.id == 1));
        drop(lingering);
    }
    api.stop().await;
}

/// The exposition's lines, sorted, without the sample that moves between scrapes by itself.
fn steady(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("fabrik_uptime_seconds "))
        .collect();
    lines.sort_unstable();
    lines
}

/// `/metrics` on the API's address answers (with the API's token) exactly as the metrics port
/// does; every drive of the box appears once (one exported nowhere too), and its health
/// gauges are the REST drive view's health.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_the_api_address_agree_with_the_drive_view() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path()).await;
    let metrics =
        MetricsEndpoint::start(api.target.manager(), "127.0.0.1:0".parse().unwrap(), None)
            .await
            .unwrap();
    let host = HostIdentity::random();
    let ctrl = connect(api.nvme(), &nqn("02"), &host).await.unwrap();
    ctrl.write(1, 0, common::random_data(8192, 1), false)
        .await
        .unwrap();
    ctrl.read(1, 0, 1).await.unwrap();
    // Drive 03 leaves its subsystem: no namespace exports it any more.
    api.admin
        .delete(&format!("/subsystems/{}/namespaces/1", nqn("03")))
        .await
        .unwrap();

    let (ctype, on_api) = scrape_with(api.api, None, Some(TOKEN)).await;
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let (_, on_port) = scrape(metrics.addr(), None).await;
    assert_eq!(steady(&on_api), steady(&on_port));

    let samples = parse(&on_api);
    let drives = api.admin.drives().await.unwrap();
    let info: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "fabrik_drive_info")
        .collect();
    assert_eq!(
        info.iter()
            .map(|s| s.labels["drive"].as_str())
            .collect::<Vec<_>>(),
        ["00", "01", "02", "03"],
        "every drive once"
    );
    for d in &drives {
        let h = &d.health;
        let id = [("drive", d.id.as_str())];
        let subsystem = d.subsystems.first().map_or("", String::as_str);
        assert_eq!(
            value(
                &samples,
                "fabrik_drive_info",
                &[
                    ("drive", &d.id),
                    ("subsystem", subsystem),
                    ("health_source", &h.source),
                    ("backend", &d.backend)
                ]
            ),
            1.0,
            "drive {}",
            d.id
        );
        let ready = value(&samples, "fabrik_drive_ready", &id);
        assert_eq!(ready == 1.0, h.state != "not_ready", "drive {}", d.id);
        let gauge = |name| value(&samples, name, &id);
        assert_eq!(
            gauge("fabrik_drive_critical_warning"),
            h.critical_warnings as f64
        );
        assert_eq!(
            gauge("fabrik_drive_media_errors_total"),
            h.media_errors as f64
        );
        assert_eq!(
            gauge("fabrik_drive_power_on_seconds"),
            (h.power_on_hours * 3600) as f64
        );
        assert_eq!(
            gauge("fabrik_drive_write_bytes_total"),
            h.bytes_written as f64
        );
        assert_eq!(gauge("fabrik_drive_read_ops_total"), h.read_commands as f64);
        // RAM drives: no sensor, in either.
        assert_eq!(h.temperature_celsius, None);
        assert_eq!(h.percentage_used, None);
    }
    assert!(!on_api.contains("fabrik_drive_temperature"));
    assert!(!on_api.contains("fabrik_drive_endurance_used"));
    let d2 = drives.iter().find(|d| d.id == "02").unwrap();
    assert_eq!(
        (d2.health.bytes_written, d2.health.bytes_read),
        (8192, 4096)
    );
    let d3 = drives.iter().find(|d| d.id == "03").unwrap();
    assert!(d3.subsystems.is_empty(), "{d3:?}");

    ctrl.shutdown().await.unwrap();
    metrics.shutdown().await;
    api.stop().await;
}
