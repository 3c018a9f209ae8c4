//! Fabrics commands: Connect (creating or joining a controller), Property Get / Set, Disconnect.

use std::sync::Arc;

use bytes::Bytes;
use fabrik_proto::fabrics::connect::{self, invalid_parameter_result};
use fabrik_proto::fabrics::property::{offset, version, Cc, SHST_COMPLETE, SHST_OCCURRING};
use fabrik_proto::fabrics::{ConnectData, FabricsCommand, CATTR_DISABLE_SQ_FLOW, CONNECT_DATA_LEN};
use fabrik_proto::Status;

use fabrik_proto::auth::CONNECT_AUTH_REQUIRED;

use super::auth::QueueAuth;
use super::queue::{Binding, Queue, Response};
use super::{keepalive, limits, Controller, ControllerKind};

/// How long a Connect waits for the host's previous controller to finish its commands.
const FENCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// NVMe version this target implements (VS and Identify VER).
pub const NVME_VERSION: u32 = version(1, 3, 0);

fn invalid_param(in_data: bool, offset: u16) -> Response {
    Response {
        result: invalid_parameter_result(in_data, offset) as u64,
        status: Status::CONNECT_INVALID_PARAMETERS,
        ..Response::default()
    }
}

impl Queue {
    pub(super) async fn execute_fabrics(&self, cmd: FabricsCommand, data: Bytes) -> Response {
        match cmd {
            FabricsCommand::Connect {
                recfmt,
                qid,
                sqsize,
                cattr,
                kato,
            } => self.connect(recfmt, qid, sqsize, cattr, kato, &data).await,
            FabricsCommand::PropertyGet { size8, offset } => match self.controller() {
                Some(ctrl) => ctrl.property_get(size8, offset),
                None => Response::status(Status::COMMAND_SEQUENCE_ERROR),
            },
            FabricsCommand::PropertySet {
                size8,
                offset,
                value,
            } => match self.controller() {
                Some(ctrl) => ctrl.property_set(size8, offset, value),
                None => Response::status(Status::COMMAND_SEQUENCE_ERROR),
            },
            FabricsCommand::AuthSend { .. } => self.auth_send(&data),
            FabricsCommand::AuthReceive { len, .. } => self.auth_receive(len),
            FabricsCommand::Disconnect { recfmt } => {
                if recfmt != 0 {
                    return Response::status(Status::CONNECT_INCOMPATIBLE_FORMAT);
                }
                Response {
                    close: true,
                    ..Response::ok()
                }
            }
        }
    }

    /// Connect: qid 0 creates a controller (dynamic model); qid > 0 joins the controller named by
    /// CNTLID in the connect data. Status and IATTR/IPO as the Linux target answers.
    async fn connect(
        &self,
        recfmt: u16,
        qid: u16,
        sqsize: u16,
        cattr: u8,
        kato: u32,
        data: &[u8],
    ) -> Response {
        if recfmt != 0 {
            return Response::status(Status::CONNECT_INCOMPATIBLE_FORMAT);
        }
        if data.len() < CONNECT_DATA_LEN {
            return Response::status(Status::SGL_LENGTH_INVALID);
        }
        let cd = match ConnectData::decode(data) {
            Ok(cd) => cd,
            Err(e) => {
                let off = e.offset() as u16;
                let field = if off >= connect::OFFSET_HOSTNQN {
                    connect::OFFSET_HOSTNQN
                } else {
                    connect::OFFSET_SUBNQN
                };
                return invalid_param(true, field);
            }
        };
        let entries = sqsize as u32 + 1;
        let max_entries = limits::max_queue_entries(qid);
        if sqsize == 0 || entries > max_entries {
            return invalid_param(false, connect::SQE_OFFSET_SQSIZE);
        }
        let sq_flow_disabled = cattr & CATTR_DISABLE_SQ_FLOW != 0;
        let hostnqn = cd.hostnqn.as_ref().map(|n| n.to_string());
        // A TLS channel is bound to the host and subsystem its PSK identity names: another
        // host's key opens no controller of this one.
        if let Some(id) = &self.tls_identity {
            if hostnqn.as_deref() != Some(id.hostnqn.as_str()) || cd.subnqn.as_str() != id.subnqn {
                tracing::info!(hostnqn = hostnqn.as_deref().unwrap_or(super::ANONYMOUS_HOST), subnqn = %cd.subnqn, identity = %id.to_text(), "connect refused: the NQNs are not those of the TLS PSK identity");
                return Response {
                    result: invalid_parameter_result(true, connect::OFFSET_HOSTNQN) as u64,
                    status: Status::CONNECT_INVALID_HOST,
                    ..Response::default()
                };
            }
        }

        let ctrl = if qid == 0 {
            if cd.cntlid != 0xffff {
                return invalid_param(true, connect::OFFSET_CNTLID);
            }
            // The host's earlier association first finishes what it had at the backend.
            if let Some(sub) = self.target.subsystem(cd.subnqn.as_str()) {
                let hostnqn = cd.hostnqn.as_ref().map(|n| n.as_str());
                if !sub.fence(hostnqn, FENCE_LIMIT).await {
                    tracing::warn!(subnqn = %cd.subnqn, "connect refused for now: the host's previous controller still has commands at the drive");
                    return Response::status(Status::CONNECT_CONTROLLER_BUSY);
                }
            }
            match self.create_controller(&cd, kato) {
                Ok(c) => c,
                Err(r) => return r,
            }
        } else {
            let Some(sub) = self.target.subsystem(cd.subnqn.as_str()) else {
                return invalid_param(true, connect::OFFSET_SUBNQN);
            };
            let Some(ctrl) = sub.controller(cd.cntlid).filter(|c| c.hostnqn == hostnqn) else {
                return invalid_param(true, connect::OFFSET_CNTLID);
            };
            if qid as u32 > ctrl.max_io_qid() {
                return invalid_param(false, connect::SQE_OFFSET_QID);
            }
            if !ctrl.attach_io_queue(qid) {
                return Response::status(Status::COMMAND_SEQUENCE_ERROR);
            }
            ctrl
        };
        let cntlid = ctrl.cntlid;
        // A host with a secret authenticates on every queue to an NVM subsystem.
        let must_authenticate = matches!(ctrl.kind, ControllerKind::Io(_))
            && self.target.host_auth(hostnqn.as_deref()).is_some();
        if !self.bind(Binding {
            ctrl: ctrl.clone(),
            qid,
            entries,
            sq_flow_disabled,
            teardown: ctrl.teardown.child_token(),
            namespaces: Arc::default(),
            auth: if must_authenticate {
                QueueAuth::required()
            } else {
                QueueAuth::default()
            },
        }) {
            // A second Connect raced the first on this queue.
            if qid != 0 {
                ctrl.detach_io_queue(qid);
            }
            return Response::status(Status::COMMAND_SEQUENCE_ERROR);
        }
        if let Some(b) = self.binding() {
            b.auth.arm_deadline(&ctrl, qid, b.teardown.clone());
        }
        tracing::debug!(cntlid, qid, entries, hostnqn = %ctrl.host_label(), subnqn = %cd.subnqn, must_authenticate, "queue connected");
        let authreq = if must_authenticate {
            CONNECT_AUTH_REQUIRED
        } else {
            0
        };
        Response::result((cntlid as u32 | authreq) as u64)
    }

    fn create_controller(&self, cd: &ConnectData, kato: u32) -> Result<Arc<Controller>, Response> {
        let hostnqn = cd.hostnqn.as_ref().map(|n| n.to_string());
        let port = self.port_info();
        let target = self.target.clone();
        let ctrl = if cd.subnqn.is_discovery() {
            self.target
                .register_discovery_controller(|id| {
                    Arc::new(Controller::new(
                        id,
                        ControllerKind::Discovery,
                        hostnqn.clone(),
                        cd.host_id,
                        port,
                        target,
                        kato,
                    ))
                })
                .ok_or_else(|| Response::status(Status::CONNECT_CONTROLLER_BUSY))?
        } else {
            let Some(sub) = self.target.subsystem(cd.subnqn.as_str()) else {
                return Err(invalid_param(true, connect::OFFSET_SUBNQN));
            };
            let unauthenticated = sub.require_auth.load(std::sync::atomic::Ordering::Relaxed)
                && self.target.host_auth(hostnqn.as_deref()).is_none();
            if unauthenticated || !sub.host_allowed(hostnqn.as_deref()) {
                let host = hostnqn.as_deref().unwrap_or(super::ANONYMOUS_HOST);
                let why = match unauthenticated {
                    true => "the subsystem requires DH-HMAC-CHAP and the host has no secret",
                    false => "host not allowed",
                };
                tracing::info!(hostnqn = %host, subnqn = %sub.nqn, "connect refused: {why}");
                return Err(Response {
                    result: invalid_parameter_result(true, connect::OFFSET_HOSTNQN) as u64,
                    status: Status::CONNECT_INVALID_HOST,
                    ..Response::default()
                });
            }
            let s = sub.clone();
            let ctrl = sub
                .register_controller(&self.target.cntlids, |id| {
                    Arc::new(Controller::new(
                        id,
                        ControllerKind::Io(s),
                        hostnqn.clone(),
                        cd.host_id,
                        port,
                        target,
                        kato,
                    ))
                })
                .ok_or_else(|| Response::status(Status::CONNECT_CONTROLLER_BUSY))?;
            // The management API may have taken the host's access or the subsystem away while
            // this Connect was checked: it sweeps registered controllers after the change, so
            // looking again after registering closes the gap.
            let current = self.target.subsystem(cd.subnqn.as_str());
            if !sub.host_allowed(hostnqn.as_deref())
                || !current.is_some_and(|c| Arc::ptr_eq(&c, &sub))
            {
                ctrl.shut_down("access changed during Connect");
                return Err(Response {
                    result: invalid_parameter_result(true, connect::OFFSET_HOSTNQN) as u64,
                    status: Status::CONNECT_INVALID_HOST,
                    ..Response::default()
                });
            }
            ctrl
        };
        // After registering: a change of limits from now on finds it among the live ones.
        if let Some(l) = self.target.host_limiter(ctrl.hostnqn.as_deref()) {
            let _ = ctrl.qos.set(l);
        }
        tracing::info!(cntlid = ctrl.cntlid, subnqn = %cd.subnqn, hostnqn = %ctrl.host_label(), peer = %self.peer_addr, kato, "controller created");
        keepalive::start(&ctrl);
        Ok(ctrl)
    }
}

impl Controller {
    pub(super) fn property_get(&self, size8: bool, off: u32) -> Response {
        let st = self.state.lock().unwrap();
        let (value, wide) = match off {
            offset::CAP => (self.cap().to_u64(), true),
            offset::VS => (NVME_VERSION as u64, false),
            offset::CC => (st.cc.to_u32() as u64, false),
            offset::CSTS => (st.csts.to_u32() as u64, false),
            _ => return Response::status(Status::INVALID_FIELD),
        };
        if wide != size8 {
            return Response::status(Status::INVALID_FIELD);
        }
        Response::result(value)
    }

    /// Only CC is writable. EN 0->1 checks the queue entry sizes and page size and sets RDY (or
    /// CFS); EN 1->0 resets (I/O queues dropped); SHN starts a shutdown that flushes every drive.
    pub(super) fn property_set(self: &Arc<Self>, size8: bool, off: u32, value: u64) -> Response {
        if off != offset::CC || size8 {
            return Response::status(Status::INVALID_FIELD);
        }
        let new = Cc::from_u32(value as u32);
        let mut st = self.state.lock().unwrap();
        let old = st.cc;
        st.cc = new;
        if new.en && !old.en {
            let valid =
                new.iosqes == 6 && new.iocqes == 4 && new.mps == 0 && new.ams == 0 && new.css == 0;
            if valid {
                self.set_ready(&mut st, true);
            } else {
                tracing::warn!(cntlid = self.cntlid, cc = value, "invalid CC on enable");
                st.csts.cfs = true;
            }
        } else if !new.en && old.en {
            self.set_ready(&mut st, false);
            st.csts.shst = 0;
            st.io_queues_granted = None;
        }
        if new.shn != 0 && old.shn == 0 {
            st.csts.shst = SHST_OCCURRING;
            drop(st);
            let ctrl = self.clone();
            self.target.spawn_control(async move {
                let flushed = ctrl.flush_all().await;
                let mut st = ctrl.state.lock().unwrap();
                if flushed.is_success() {
                    st.csts.shst = SHST_COMPLETE;
                    tracing::info!(cntlid = ctrl.cntlid, subnqn = %ctrl.subnqn(), "shutdown complete");
                } else {
                    // Not "complete": data the host wrote may be lost. The shutdown stays in
                    // progress (the host gives up on it and says so) and CFS reports the fault.
                    st.csts.cfs = true;
                    tracing::error!(cntlid = ctrl.cntlid, subnqn = %ctrl.subnqn(), "shutdown failed: a drive's flush failed");
                }
            });
        }
        Response::ok()
    }

    /// Flushes every namespace's drive (shutdown, broadcast Flush).
    pub(super) async fn flush_all(&self) -> Status {
        let mut status = Status::SUCCESS;
        if let Some(sub) = self.subsystem() {
            for ns in sub.namespaces() {
                if let Err(e) = ns.drive.flush().await {
                    tracing::error!(nsid = ns.nsid, drive = %ns.drive_id, "flush failed: {e}");
                    status = Status::WRITE_FAULT;
                }
            }
        }
        status
    }
}
