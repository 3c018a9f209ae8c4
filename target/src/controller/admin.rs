//! Admin commands: Identify, Get Log Page, Get / Set Features, Keep Alive, Abort,
//! Asynchronous Event Request. A discovery controller answers only the subset Linux nvmet does.

use bytes::{Bytes, BytesMut};
use fabrik_proto::nvme::admin::{cns, csi, AdminCommand};
use fabrik_proto::nvme::features::{aec, fid, sel, NumberOfQueues};
use fabrik_proto::nvme::identify::{
    anacap, cmic, dctype, encode_ns_descriptors, encode_ns_list, sgls, IdentifyController,
    IdentifyNamespace, LbaFormat, NsDescriptor, IDENTIFY_LEN,
};
use fabrik_proto::nvme::log::{
    critical, encode_changed_ns_list, lid, FirmwareSlotLog, SmartLog, ANA_GROUP_DESCRIPTOR_LEN,
    ANA_LOG_HEADER_LEN, ANA_LSP_GROUPS_ONLY, CHANGED_NS_LIST_LEN, ERROR_LOG_ENTRY_LEN,
    SMART_LOG_LEN,
};
use fabrik_proto::nvme::reservation;
use fabrik_proto::nvme::sqe::SQE_LEN;
use fabrik_proto::nvme::NSID_BROADCAST;
use fabrik_proto::Status;

use super::fabrics::NVME_VERSION;
use super::queue::Response;
use super::{limits, Controller};

const FIRMWARE_REVISION: &str = env!("CARGO_PKG_VERSION");

impl Controller {
    /// Checks that need no data: readiness, the discovery controller's command subset, AER limit.
    pub(super) fn admit_admin(&self, cmd: &AdminCommand, transfer_len: u32) -> Result<(), Status> {
        if self.is_discovery() {
            match cmd {
                AdminCommand::Identify {
                    cns: cns::CONTROLLER,
                    ..
                }
                | AdminCommand::GetLogPage {
                    lid: lid::DISCOVERY,
                    ..
                }
                | AdminCommand::GetFeatures { .. }
                | AdminCommand::SetFeatures { .. }
                | AdminCommand::AsyncEventRequest
                | AdminCommand::KeepAlive => {}
                AdminCommand::DiscoveryInfoManagement { .. } if self.target.cdc.is_some() => {}
                AdminCommand::Identify { .. } | AdminCommand::GetLogPage { .. } => {
                    return Err(Status::INVALID_FIELD)
                }
                _ => return Err(Status::INVALID_OPCODE),
            }
        } else if matches!(cmd, AdminCommand::DiscoveryInfoManagement { .. }) {
            return Err(Status::INVALID_OPCODE);
        }
        if !self.is_ready() && !matches!(cmd, AdminCommand::KeepAlive) {
            return Err(Status::COMMAND_SEQUENCE_ERROR);
        }
        // The SGL must describe exactly the data the command moves, as Linux nvmet checks
        // (a short buffer would be left partly stale, a long one partly unwritten).
        let expected = match *cmd {
            AdminCommand::Identify { .. } => Some(IDENTIFY_LEN as u32),
            AdminCommand::GetLogPage { .. } => Some(cmd.log_len() as u32),
            AdminCommand::GetFeatures {
                fid: fid::HOST_IDENTIFIER,
                ..
            } => Some(16),
            _ => None,
        };
        if expected.is_some_and(|len| len != transfer_len) {
            return Err(Status::SGL_LENGTH_INVALID);
        }
        if matches!(cmd, AdminCommand::AsyncEventRequest) {
            self.admit_aer()?;
        }
        Ok(())
    }

    pub(super) async fn execute_admin(&self, cmd: AdminCommand, len: u32, data: Bytes) -> Response {
        self.keep_alive();
        let len = len as usize;
        match cmd {
            // Transfer lengths were checked exactly in `admit_admin`.
            AdminCommand::Identify { nsid, cns, csi, .. } => self.identify(nsid, cns, csi),
            AdminCommand::GetLogPage {
                nsid,
                lid,
                lsp,
                rae,
                numd: _,
                lpo,
                csi: _,
            } => self.get_log_page(nsid, lid, lsp, rae, lpo, len).await,
            AdminCommand::GetFeatures {
                nsid,
                fid,
                sel,
                cdw11,
            } => self.get_features(nsid, fid, sel, cdw11, len),
            // Persisted (and made on the other module) like a reservation command: saved by
            // nature, so SV is accepted.
            AdminCommand::SetFeatures {
                nsid,
                fid: fid::RESERVATION_PERSISTENCE,
                cdw11,
                ..
            } if !self.is_discovery() => self.set_reservation_persistence(nsid, cdw11).await,
            AdminCommand::SetFeatures {
                nsid,
                fid,
                save,
                cdw11,
                ..
            } => self.set_features(nsid, fid, save, cdw11, &data),
            AdminCommand::Abort { .. } => Response::result(1), // bit 0: command not aborted
            AdminCommand::AsyncEventRequest => {
                tokio::select! {
                    r = self.async_event_request() => r,
                    // Never completed on teardown: the queue closes and the host forgets it.
                    _ = self.teardown.cancelled() => std::future::pending().await,
                }
            }
            AdminCommand::KeepAlive => Response::ok(),
            AdminCommand::DiscoveryInfoManagement { tas } => {
                self.discovery_info_management(tas, &data)
            }
        }
    }

    fn identify(&self, nsid: u32, cns: u8, csi: u8) -> Response {
        let mut buf = Box::new([0u8; IDENTIFY_LEN]);
        match cns {
            cns::CONTROLLER => self.identify_controller().encode(&mut buf),
            cns::NAMESPACE => {
                let Some(sub) = self.subsystem() else {
                    return Response::status(Status::INVALID_FIELD);
                };
                if nsid == 0 || nsid == NSID_BROADCAST {
                    return Response::status(Status::INVALID_NAMESPACE);
                }
                // Inactive NSIDs answer an all-zero structure, as the spec asks.
                if let Some(ns) = sub.namespace(nsid) {
                    identify_namespace(&ns).encode(&mut buf);
                }
            }
            cns::ACTIVE_NS_LIST => {
                let Some(sub) = self.subsystem() else {
                    return Response::status(Status::INVALID_FIELD);
                };
                if nsid >= 0xffff_fffe {
                    return Response::status(Status::INVALID_NAMESPACE);
                }
                let nsids: Vec<u32> = sub
                    .namespaces()
                    .iter()
                    .map(|ns| ns.nsid)
                    .filter(|&id| id > nsid)
                    .take(1024)
                    .collect();
                encode_ns_list(&nsids, &mut buf);
            }
            cns::NS_ID_DESCRIPTORS => {
                let Some(sub) = self.subsystem() else {
                    return Response::status(Status::INVALID_FIELD);
                };
                let Some(ns) = sub.namespace(nsid) else {
                    return Response::status(Status::INVALID_NAMESPACE);
                };
                encode_ns_descriptors(
                    &[NsDescriptor::Nguid(ns.nguid), NsDescriptor::Uuid(ns.uuid)],
                    &mut buf,
                );
            }
            // The NVM command set's controller data (SPDK's host asks at init): all zero, no
            // size limit of its own on Write Zeroes, Write Uncorrectable or Dataset Management
            // beyond MDTS, as Linux nvmet answers.
            cns::CSI_CONTROLLER if csi == csi::NVM && !self.is_discovery() => {}
            _ => return Response::status(Status::INVALID_FIELD),
        }
        Response::data(Bytes::from(buf as Box<[u8]>))
    }

    pub fn identify_controller(&self) -> IdentifyController {
        let (serial, model, nn) = match self.subsystem() {
            Some(s) => (s.serial.clone(), s.model.clone(), limits::MAX_NAMESPACES),
            None => (
                // Stable for the box, like the drives' serial numbers.
                crate::model::stable_id(&self.target.box_name, b"discovery")[..10]
                    .iter()
                    .map(|b| format!("{b:02X}"))
                    .collect(),
                "fabrik discovery".into(),
                0,
            ),
        };
        let caps = self.port.caps;
        let mut sgls = sgls::SUPPORTED;
        if caps.keyed_sgls {
            sgls |= sgls::KEYED;
        }
        if caps.in_capsule_data > 0 {
            sgls |= sgls::OFFSET;
        }
        let vwc = self.has_volatile_cache();
        IdentifyController {
            serial,
            model,
            firmware: FIRMWARE_REVISION.into(),
            rab: 6,
            // Several ports and controllers reach a subsystem, with ANA reporting: the Linux host
            // then builds one multipath node per namespace over every path.
            cmic: if self.is_discovery() {
                0
            } else {
                cmic::MULTI_PORT | cmic::MULTI_CONTROLLER | cmic::ANA_REPORTING
            },
            mdts: limits::MDTS,
            cntlid: self.cntlid,
            ver: NVME_VERSION,
            oaes: if self.is_discovery() {
                aec::DISCOVERY_LOG_CHANGE_NOTICES
            } else {
                aec::NS_ATTR_NOTICES | aec::ANA_CHANGE_NOTICES
            },
            cntrltype: if self.is_discovery() { 2 } else { 1 },
            dctype: match (self.is_discovery(), &self.target.cdc) {
                (false, _) => dctype::NOT_REPORTED,
                (true, None) => dctype::DDC,
                (true, Some(_)) => dctype::CDC,
            },
            acl: 3,
            aerl: (limits::AER_LIMIT - 1) as u8,
            frmw: 1 << 1 | 1, // one slot, read-only
            lpa: 1 << 2,      // extended data (LPO, NUMDU)
            elpe: (limits::ERROR_LOG_ENTRIES - 1) as u8,
            wctemp: 0x157,
            cctemp: 0x175,
            kas: limits::KAS,
            anatt: if self.is_discovery() {
                0
            } else {
                limits::ANATT
            },
            anacap: if self.is_discovery() {
                0
            } else {
                anacap::OPTIMIZED
            },
            anagrpmax: if self.is_discovery() {
                0
            } else {
                self.target.ana.groups()
            },
            nanagrpid: if self.is_discovery() {
                0
            } else {
                self.target.ana.groups()
            },
            mnan: if self.is_discovery() {
                0
            } else {
                limits::MAX_NAMESPACES
            },
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: limits::MAX_QUEUE_ENTRIES as u16,
            nn,
            oncs: if self.is_discovery() {
                0
            } else {
                1 << 2 | 1 << 3 | reservation::ONCS_RESERVATIONS
            }, // DSM, Write Zeroes, reservations
            vwc: if vwc { 0x7 } else { 0 }, // present; Flush to all namespaces supported
            sgls,
            subnqn: self.subnqn(),
            // In 16-byte units, the SQE included.
            ioccsz: (SQE_LEN as u32 + caps.in_capsule_data) / 16,
            iorcsz: 1,
            msdbd: 1,
            ps0_max_power_cw: 0,
            ..IdentifyController::default()
        }
    }

    async fn get_log_page(
        &self,
        nsid: u32,
        log: u8,
        lsp: u8,
        rae: bool,
        lpo: u64,
        len: usize,
    ) -> Response {
        let page: Vec<u8> = match log {
            lid::ERROR_INFO => {
                let st = self.state.lock().unwrap();
                let mut b = vec![0u8; st.error_log.len().max(1) * ERROR_LOG_ENTRY_LEN];
                for (i, e) in st.error_log.iter().enumerate() {
                    e.encode(&mut b[i * ERROR_LOG_ENTRY_LEN..(i + 1) * ERROR_LOG_ENTRY_LEN]);
                }
                b
            }
            lid::SMART => {
                let mut b = [0u8; SMART_LOG_LEN];
                match self.smart_log(nsid) {
                    Ok(s) => s.encode(&mut b),
                    Err(st) => return Response::status(st),
                }
                b.to_vec()
            }
            lid::FIRMWARE_SLOT => {
                let mut log = FirmwareSlotLog {
                    afi: 1,
                    ..FirmwareSlotLog::default()
                };
                log.slots[0] = FIRMWARE_REVISION.into();
                let mut b = [0u8; 512];
                log.encode(&mut b);
                b.to_vec()
            }
            lid::CHANGED_NS_LIST => {
                let mut b = [0u8; CHANGED_NS_LIST_LEN];
                encode_changed_ns_list(&self.take_changed_namespaces(rae), &mut b);
                b.to_vec()
            }
            lid::DISCOVERY if self.is_discovery() => self.discovery_log_page().await,
            // Each read takes one page (an empty one when none is queued).
            reservation::NOTIFICATION_LOG if !self.is_discovery() => {
                self.take_reservation_notice().encode().to_vec()
            }
            lid::ANA if !self.is_discovery() => match self.ana_log() {
                Some(log) => {
                    // Padded to the most it can hold (as the Linux host sizes it): nvme-cli reads
                    // it 4 KiB at a time, and its second read's offset is past the groups.
                    let mut page = log.encode(lsp & ANA_LSP_GROUPS_ONLY != 0);
                    let most = ANA_LOG_HEADER_LEN
                        + ANA_GROUP_DESCRIPTOR_LEN * self.target.ana.groups() as usize
                        + 4 * limits::MAX_NAMESPACES as usize;
                    page.resize(page.len().max(most), 0);
                    page
                }
                None => return Response::status(Status::INVALID_FIELD),
            },
            _ => return Response::status(Status::INVALID_LOG_PAGE),
        };
        if lpo > page.len() as u64 {
            return Response::status(Status::INVALID_FIELD);
        }
        self.log_page_read(log, rae);
        let mut out = BytesMut::zeroed(len);
        let avail = &page[lpo as usize..];
        let n = avail.len().min(len);
        out[..n].copy_from_slice(&avail[..n]);
        Response::data(out.freeze())
    }

    /// SMART / health from what the target tracks: data units and commands per namespace, media
    /// errors, power-on time of this fabrikd. No sensor exists for file or RAM drives, so the
    /// temperature is reported as 0 (unknown), as Linux nvmet does.
    fn smart_log(&self, nsid: u32) -> Result<SmartLog, Status> {
        use std::sync::atomic::Ordering::Relaxed;
        let sub = self.subsystem().ok_or(Status::INVALID_FIELD)?;
        let namespaces = if nsid == NSID_BROADCAST || nsid == 0 {
            sub.namespaces()
        } else {
            vec![sub.namespace(nsid).ok_or(Status::INVALID_NAMESPACE)?]
        };
        let mut log = SmartLog {
            available_spare: 100,
            available_spare_threshold: 10,
            power_cycles: 1,
            power_on_hours: (self.target.started.elapsed().as_secs() / 3600) as u128,
            ..SmartLog::default()
        };
        for ns in namespaces {
            let s = &ns.stats;
            // Data units are thousands of 512-byte units, rounded up.
            log.data_units_read += (s.bytes_read() as u128 / 512).div_ceil(1000);
            log.data_units_written += (s.bytes_written() as u128 / 512).div_ceil(1000);
            log.host_read_commands += s.read_commands() as u128;
            log.host_write_commands += s.write_commands() as u128;
            log.media_errors += s.media_errors.load(Relaxed) as u128;
            if ns.drive.fault().is_some() {
                // It lost a write and refuses changes until an operator clears it.
                log.critical_warning |= critical::READ_ONLY | critical::DEGRADED;
            }
        }
        log.error_log_entries = self.state.lock().unwrap().error_count as u128;
        Ok(log)
    }

    fn get_features(&self, nsid: u32, feature: u8, select: u8, cdw11: u32, len: usize) -> Response {
        if select == sel::SUPPORTED_CAPABILITIES {
            // Bit 0 saveable, bit 1 namespace specific, bit 2 changeable.
            return Response::result(match feature {
                fid::NUMBER_OF_QUEUES
                | fid::KEEP_ALIVE_TIMER
                | fid::ASYNC_EVENT_CONFIG
                | fid::VOLATILE_WRITE_CACHE => 1 << 2,
                fid::RESERVATION_NOTIFICATION_MASK => 1 << 2 | 1 << 1,
                fid::RESERVATION_PERSISTENCE => 1 << 2 | 1 << 1 | 1,
                _ => 0,
            });
        }
        let default = select == sel::DEFAULT;
        if !self.is_discovery() {
            match feature {
                fid::RESERVATION_NOTIFICATION_MASK => {
                    return self.reservation_mask(nsid, default);
                }
                fid::RESERVATION_PERSISTENCE => return self.reservation_persistence(nsid, default),
                _ => {}
            }
        }
        let st = self.state.lock().unwrap();
        let value: u32 = match feature {
            fid::NUMBER_OF_QUEUES => {
                let n = if default {
                    limits::MAX_IO_QUEUES
                } else {
                    st.io_queues_granted.unwrap_or(limits::MAX_IO_QUEUES)
                };
                NumberOfQueues {
                    submission: n,
                    completion: n,
                }
                .to_dword()
            }
            fid::KEEP_ALIVE_TIMER => st.kato_ms,
            fid::ASYNC_EVENT_CONFIG => {
                if default {
                    0
                } else {
                    st.async_event_config
                }
            }
            fid::VOLATILE_WRITE_CACHE if !self.is_discovery() => {
                (self.has_volatile_cache() && self.write_cache_choice().unwrap_or(true)) as u32
            }
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::ERROR_RECOVERY
            | fid::INTERRUPT_COALESCING
            | fid::WRITE_ATOMICITY
                if !self.is_discovery() =>
            {
                0
            }
            fid::TEMPERATURE_THRESHOLD if !self.is_discovery() => 0x157,
            fid::HOST_IDENTIFIER => {
                // EXHID (bit 0) must ask for the 128-bit identifier, the only one fabrics have.
                if cdw11 & 1 == 0 || len < 16 {
                    return Response::status(Status::INVALID_FIELD);
                }
                return Response::data(Bytes::copy_from_slice(&self.host_id));
            }
            _ => return Response::status(Status::INVALID_FIELD),
        };
        Response::result(value as u64)
    }

    fn set_features(
        &self,
        nsid: u32,
        feature: u8,
        save: bool,
        cdw11: u32,
        _data: &[u8],
    ) -> Response {
        if save {
            return Response::status(Status::FEATURE_NOT_SAVEABLE);
        }
        if feature == fid::RESERVATION_NOTIFICATION_MASK && !self.is_discovery() {
            return self.set_reservation_mask(nsid, cdw11);
        }
        let mut st = self.state.lock().unwrap();
        match feature {
            fid::NUMBER_OF_QUEUES if !self.is_discovery() => {
                if cdw11 & 0xffff == 0xffff || cdw11 >> 16 == 0xffff {
                    return Response::status(Status::INVALID_FIELD);
                }
                if !st.io_queues.is_empty() {
                    return Response::status(Status::COMMAND_SEQUENCE_ERROR);
                }
                let asked = NumberOfQueues::from_dword(cdw11);
                let granted = asked
                    .submission
                    .min(asked.completion)
                    .min(limits::MAX_IO_QUEUES);
                st.io_queues_granted = Some(granted);
                Response::result(
                    NumberOfQueues {
                        submission: granted,
                        completion: granted,
                    }
                    .to_dword() as u64,
                )
            }
            fid::KEEP_ALIVE_TIMER => {
                st.kato_ms = cdw11;
                self.keep_alive();
                Response::ok()
            }
            fid::ASYNC_EVENT_CONFIG => {
                let supported = if self.is_discovery() {
                    aec::DISCOVERY_LOG_CHANGE_NOTICES
                } else {
                    aec::NS_ATTR_NOTICES | aec::ANA_CHANGE_NOTICES | aec::SMART_MASK
                };
                if cdw11 & !supported != 0 {
                    return Response::status(Status::INVALID_FIELD);
                }
                st.async_event_config = cdw11;
                Response::ok()
            }
            fid::VOLATILE_WRITE_CACHE if !self.is_discovery() => {
                if !self.has_volatile_cache() {
                    return Response::status(Status::FEATURE_NOT_CHANGEABLE);
                }
                // With the cache off every write is made durable before it completes.
                self.set_write_cache_choice(cdw11 & 1 != 0);
                Response::ok()
            }
            fid::HOST_IDENTIFIER => Response::status(Status::COMMAND_SEQUENCE_ERROR),
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::TEMPERATURE_THRESHOLD
            | fid::ERROR_RECOVERY
            | fid::INTERRUPT_COALESCING
            | fid::WRITE_ATOMICITY
                if !self.is_discovery() =>
            {
                Response::status(Status::FEATURE_NOT_CHANGEABLE)
            }
            _ => Response::status(Status::INVALID_FIELD),
        }
    }
}

/// Identify Namespace for an active namespace: one LBA format, deallocated blocks read as zeros,
/// shared (NMIC) so multipath hosts accept a second controller.
pub(super) fn identify_namespace(ns: &crate::model::Namespace) -> IdentifyNamespace {
    let blocks = ns.blocks();
    IdentifyNamespace {
        nsze: blocks,
        ncap: blocks,
        nuse: blocks,
        nlbaf: 0,
        flbas: 0,
        nmic: 1,
        // Every type, kept through a power loss (the state file), IEKEY as NVMe 1.3 means it.
        rescap: reservation::rescap::PTPL
            | reservation::rescap::ALL_TYPES
            | reservation::rescap::IEKEY_1_3,
        anagrpid: ns.ana_group,
        dlfeat: 1 << 3 | 0b001, // Write Zeroes may deallocate; deallocated blocks read zeros
        nguid: ns.nguid,
        lbaf: vec![LbaFormat {
            ms: 0,
            lbads: ns.block_size().trailing_zeros() as u8,
            rp: 0,
        }],
        ..IdentifyNamespace::default()
    }
}
