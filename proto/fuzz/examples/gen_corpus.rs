//! Writes the checked-in seed corpus: a few valid, Linux-host-like structures per fuzz target.
//!
//! Run from proto/fuzz: `cargo run --example gen_corpus` (files are overwritten in place;
//! the output is deterministic, so a re-run after a format change shows up as a git diff).

use std::fs;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use fabrik_proto::fabrics::discovery::*;
use fabrik_proto::fabrics::nqn::Nqn;
use fabrik_proto::fabrics::{ConnectData, FabricsCommand, Transport, CATTR_DISABLE_SQ_FLOW};
use fabrik_proto::nvme::admin::{cns, AdminCommand};
use fabrik_proto::nvme::features::{fid, NumberOfQueues};
use fabrik_proto::nvme::identify::*;
use fabrik_proto::nvme::io::{DsmRange, IoCommand};
use fabrik_proto::nvme::log::*;
use fabrik_proto::rdma::{CmAccept, CmReject, CmRequest, RejectStatus};
use fabrik_proto::tcp::*;
use fabrik_proto::{Cqe, SglDescriptor, Sqe, Status};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0d3f4c52-6f0e-4b8e-9a55-52c0b8f0f1e7";
const SUBNQN: &str = "nqn.2024-01.io.fabrik:disk0";
const HOST_ID: [u8; 16] = *b"\x0d\x3f\x4c\x52\x6f\x0e\x4b\x8e\x9a\x55\x52\xc0\xb8\xf0\xf1\xe7";

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    tcp_decoder(&root.join("tcp_decoder"));
    sqe_commands(&root.join("sqe_commands"));
    connect_data(&root.join("connect_data"));
    auth_messages(&root.join("auth_messages"));
    identify(&root.join("identify"));
    log_pages(&root.join("log_pages"));
    cqe_sgl(&root.join("cqe_sgl"));
    rdma_cm(&root.join("rdma_cm"));
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
    println!("{} ({} bytes)", dir.join(name).display(), bytes.len());
}

// ---- tcp_decoder: config byte, three chunk lengths, then the stream ----

/// The fuzz target's configuration byte: role bit 0 (1 = host), DGST bits 1..3, max_data
/// index bits 3..5 (2 = 8192 bytes).
fn config(host: bool, digests: Digests) -> u8 {
    host as u8 | digests.bits() << 1 | 2 << 3
}

fn stream(host: bool, digests: Digests, chunks: [u8; 3], pdus: &[Pdu]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.extend_from_slice(&[config(host, digests)]);
    out.extend_from_slice(&chunks);
    for pdu in pdus {
        pdu.encode(digests, &mut out);
    }
    // A seed is only useful if it is valid: decode it back before writing it.
    let role = if host { Role::Host } else { Role::Controller };
    let mut dec = Decoder::new(role, 8192);
    dec.set_digests(digests);
    let mut buf = BytesMut::from(&out[4..]);
    for pdu in pdus {
        assert_eq!(dec.decode(&mut buf).as_ref(), Ok(&Some(pdu.clone())));
    }
    assert!(buf.is_empty());
    out.to_vec()
}

fn capsule(sqe: Sqe, data: Vec<u8>) -> Pdu {
    Pdu::CapsuleCmd(CapsuleCmd {
        sqe,
        data: Bytes::from(data),
    })
}

/// An SQE as the Linux TCP host sends it: PSDT = SGL, transport SGL for `len` bytes, or an
/// offset SGL when the data comes in-capsule.
fn tcp_sqe(mut sqe: Sqe, len: u32, in_capsule: bool) -> Sqe {
    let sgl = if in_capsule {
        SglDescriptor::DataBlockOffset {
            offset: 0,
            length: len,
        }
    } else {
        SglDescriptor::TransportDataBlock { length: len }
    };
    sqe.set_sgl(&sgl);
    sqe
}

fn connect_sqe(qid: u16, cid: u16) -> Sqe {
    let (sqsize, kato) = if qid == 0 { (31, 5000) } else { (127, 0) };
    let cmd = FabricsCommand::Connect {
        recfmt: 0,
        qid,
        sqsize,
        cattr: 0,
        kato,
    };
    tcp_sqe(cmd.to_sqe(cid), 1024, true)
}

fn connect_bytes(cntlid: u16) -> Vec<u8> {
    let cd = ConnectData {
        host_id: HOST_ID,
        cntlid,
        subnqn: Nqn::new(SUBNQN).unwrap(),
        hostnqn: Some(Nqn::new(HOSTNQN).unwrap()),
    };
    cd.to_bytes().to_vec()
}

fn tcp_decoder(dir: &Path) {
    let none = Digests::default();
    let both = Digests {
        header: true,
        data: true,
    };
    let hdr = Digests {
        header: true,
        data: false,
    };
    let icreq = Pdu::IcReq(IcReq {
        pfv: 0,
        hpda: 0,
        digests: both,
        maxr2t: 0,
    });
    write(dir, "ctrl-icreq", &stream(false, none, [255; 3], &[icreq]));

    let prop_get = FabricsCommand::PropertyGet {
        size8: true,
        offset: 0,
    };
    let identify = AdminCommand::Identify {
        nsid: 0,
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
    };
    let admin = [
        capsule(connect_sqe(0, 0), connect_bytes(0xffff)),
        capsule(tcp_sqe(prop_get.to_sqe(1), 0, false), vec![]),
        capsule(tcp_sqe(identify.to_sqe(0x1002), 4096, false), vec![]),
    ];
    write(
        dir,
        "ctrl-admin-connect-digests",
        &stream(false, both, [7, 99, 254], &admin),
    );

    let write_cmd = IoCommand::Write {
        nsid: 1,
        slba: 8,
        nlb: 4,
        fua: false,
    };
    let r2t_write = [
        capsule(tcp_sqe(write_cmd.to_sqe(0x2003), 2048, false), vec![]),
        Pdu::H2CData(H2CData {
            cccid: 0x2003,
            ttag: 1,
            datao: 0,
            last: false,
            data: Bytes::from(vec![0x5a; 1024]),
        }),
        Pdu::H2CData(H2CData {
            cccid: 0x2003,
            ttag: 1,
            datao: 1024,
            last: true,
            data: Bytes::from(vec![0xa5; 1024]),
        }),
    ];
    write(
        dir,
        "ctrl-write-h2cdata-hdgst",
        &stream(false, hdr, [0, 23, 200], &r2t_write),
    );

    let small_write = IoCommand::Write {
        nsid: 1,
        slba: 0,
        nlb: 1,
        fua: true,
    };
    let inline = [
        capsule(connect_sqe(1, 0), connect_bytes(1)),
        capsule(
            tcp_sqe(small_write.to_sqe(0x3001), 512, true),
            vec![0xee; 512],
        ),
    ];
    write(
        dir,
        "ctrl-io-inline-write-digests",
        &stream(false, both, [71, 3, 128], &inline),
    );

    let term = TermReq {
        fes: fes::PDU_SEQUENCE_ERROR,
        fei: 0,
        header: Bytes::new(),
    };
    write(
        dir,
        "ctrl-h2c-termreq",
        &stream(false, none, [255; 3], &[Pdu::H2CTermReq(term)]),
    );

    let icresp = Pdu::IcResp(IcResp {
        pfv: 0,
        cpda: 0,
        digests: both,
        maxh2cdata: 0x40_0000,
    });
    write(
        dir,
        "host-icresp",
        &stream(true, none, [127, 0, 255], &[icresp]),
    );

    let mut connected = Cqe::new(0, Status::SUCCESS);
    connected.result = 1;
    connected.sqhd = 1;
    let read_flow = [
        Pdu::CapsuleResp(CapsuleResp { cqe: connected }),
        Pdu::R2T(R2T {
            cccid: 0x2003,
            ttag: 1,
            r2to: 0,
            r2tl: 2048,
        }),
        Pdu::C2HData(C2HData {
            cccid: 0x1002,
            datao: 0,
            last: false,
            success: false,
            data: Bytes::from(vec![0x11; 256]),
        }),
        Pdu::C2HData(C2HData {
            cccid: 0x1002,
            datao: 256,
            last: true,
            success: false,
            data: Bytes::from(vec![0x22; 256]),
        }),
        Pdu::CapsuleResp(CapsuleResp {
            cqe: Cqe::new(0x1002, Status::SUCCESS),
        }),
        Pdu::C2HData(C2HData {
            cccid: 0x4004,
            datao: 0,
            last: true,
            success: true,
            data: Bytes::from(vec![0x33; 512]),
        }),
        Pdu::CapsuleResp(CapsuleResp {
            cqe: Cqe::new(0x5005, Status::INVALID_FIELD),
        }),
    ];
    write(
        dir,
        "host-responses-digests",
        &stream(true, both, [3, 40, 255], &read_flow),
    );

    let mut offending = BytesMut::new();
    Pdu::R2T(R2T {
        cccid: 1,
        ttag: 1,
        r2to: 0,
        r2tl: 1,
    })
    .encode(none, &mut offending);
    let term = TermReq {
        fes: fes::INVALID_HEADER_FIELD,
        fei: 0,
        header: offending.freeze(),
    };
    write(
        dir,
        "host-c2h-termreq",
        &stream(true, none, [255; 3], &[Pdu::C2HTermReq(term)]),
    );
}

// ---- sqe_commands: one SQE, DSM ranges after it ----

fn sqe_commands(dir: &Path) {
    let admin = [
        (
            "identify-ctrl",
            AdminCommand::Identify {
                nsid: 0,
                cns: cns::CONTROLLER,
                cntid: 0,
                csi: 0,
            },
            4096,
        ),
        (
            "identify-ns",
            AdminCommand::Identify {
                nsid: 1,
                cns: cns::NAMESPACE,
                cntid: 0,
                csi: 0,
            },
            4096,
        ),
        (
            "identify-ns-list",
            AdminCommand::Identify {
                nsid: 0,
                cns: cns::ACTIVE_NS_LIST,
                cntid: 0,
                csi: 0,
            },
            4096,
        ),
        (
            "get-log-smart",
            AdminCommand::GetLogPage {
                nsid: 0xffff_ffff,
                lid: lid::SMART,
                lsp: 0,
                rae: false,
                numd: 127,
                lpo: 0,
                csi: 0,
            },
            512,
        ),
        (
            "get-log-discovery",
            AdminCommand::GetLogPage {
                nsid: 0,
                lid: lid::DISCOVERY,
                lsp: 0,
                rae: false,
                numd: 1023,
                lpo: 0,
                csi: 0,
            },
            4096,
        ),
        (
            "set-features-queues",
            AdminCommand::SetFeatures {
                nsid: 0,
                fid: fid::NUMBER_OF_QUEUES,
                save: false,
                cdw11: NumberOfQueues {
                    submission: 4,
                    completion: 4,
                }
                .to_dword(),
                cdw12: 0,
                cdw13: 0,
                cdw14: 0,
            },
            0,
        ),
        (
            "get-features-kato",
            AdminCommand::GetFeatures {
                nsid: 0,
                fid: fid::KEEP_ALIVE_TIMER,
                sel: 0,
                cdw11: 0,
            },
            0,
        ),
        ("keep-alive", AdminCommand::KeepAlive, 0),
        ("aer", AdminCommand::AsyncEventRequest, 0),
    ];
    for (name, cmd, len) in admin {
        write(
            dir,
            &format!("admin-{name}"),
            &tcp_sqe(cmd.to_sqe(0x1001), len, false).to_bytes(),
        );
    }

    let io = [
        (
            "read",
            IoCommand::Read {
                nsid: 1,
                slba: 0x1000,
                nlb: 8,
                fua: false,
            },
            4096,
        ),
        (
            "write",
            IoCommand::Write {
                nsid: 1,
                slba: 0,
                nlb: 256,
                fua: true,
            },
            131072,
        ),
        ("flush", IoCommand::Flush { nsid: 1 }, 0),
        (
            "write-zeroes",
            IoCommand::WriteZeroes {
                nsid: 1,
                slba: 64,
                nlb: 64,
                fua: false,
                deallocate: true,
            },
            0,
        ),
    ];
    for (name, cmd, len) in io {
        write(
            dir,
            &format!("io-{name}"),
            &tcp_sqe(cmd.to_sqe(0x2001), len, false).to_bytes(),
        );
    }
    let dsm = IoCommand::DatasetManagement {
        nsid: 1,
        ranges: 2,
        deallocate: true,
    };
    let mut bytes = tcp_sqe(dsm.to_sqe(0x2002), 32, true).to_bytes().to_vec();
    for r in [
        DsmRange {
            attributes: 0,
            nlb: 8,
            slba: 0,
        },
        DsmRange {
            attributes: 0,
            nlb: 16,
            slba: 1024,
        },
    ] {
        let mut b = [0u8; 16];
        r.encode(&mut b);
        bytes.extend_from_slice(&b);
    }
    write(dir, "io-dsm-2-ranges", &bytes);

    write(dir, "fabrics-connect-admin", &connect_sqe(0, 0).to_bytes());
    write(dir, "fabrics-connect-io", &connect_sqe(3, 0).to_bytes());
    let fabrics = [
        (
            "connect-no-sqflow",
            FabricsCommand::Connect {
                recfmt: 0,
                qid: 0,
                sqsize: 31,
                cattr: CATTR_DISABLE_SQ_FLOW,
                kato: 15000,
            },
        ),
        (
            "property-get-cap",
            FabricsCommand::PropertyGet {
                size8: true,
                offset: 0x00,
            },
        ),
        (
            "property-get-csts",
            FabricsCommand::PropertyGet {
                size8: false,
                offset: 0x1c,
            },
        ),
        (
            "property-set-cc",
            FabricsCommand::PropertySet {
                size8: false,
                offset: 0x14,
                value: 0x0046_0001,
            },
        ),
        ("disconnect", FabricsCommand::Disconnect { recfmt: 0 }),
    ];
    for (name, cmd) in fabrics {
        write(
            dir,
            &format!("fabrics-{name}"),
            &tcp_sqe(cmd.to_sqe(0x0005), 0, false).to_bytes(),
        );
    }
}

// ---- connect_data ----

fn connect_data(dir: &Path) {
    assert!(ConnectData::decode(&connect_bytes(0xffff)).is_ok());
    write(dir, "admin-dynamic-cntlid", &connect_bytes(0xffff));
    write(dir, "io-cntlid-1", &connect_bytes(1));
    let discovery = ConnectData {
        host_id: HOST_ID,
        cntlid: 0xffff,
        subnqn: Nqn::discovery(),
        hostnqn: Some(Nqn::new(HOSTNQN).unwrap()),
    };
    write(dir, "discovery", &discovery.to_bytes()[..]);
}

// ---- identify ----

fn identify(dir: &Path) {
    let ctrl = IdentifyController {
        vid: 0x1b36,
        ssvid: 0x1b36,
        serial: "fabrik-0001".into(),
        model: "fabrik NVMe-oF target".into(),
        firmware: "0.1.0".into(),
        mdts: 5,
        cntlid: 1,
        ver: 0x0002_0000,
        oaes: 1 << 8,
        ctratt: 0,
        cntrltype: 1,
        aerl: 3,
        lpa: 0x06,
        elpe: 63,
        kas: 10,
        sqes: 0x66,
        cqes: 0x44,
        maxcmd: 128,
        nn: 32,
        oncs: 0x0c,
        vwc: 1,
        sgls: 0x0010_0005,
        subnqn: SUBNQN.into(),
        ioccsz: 260,
        iorcsz: 1,
        msdbd: 1,
        ..IdentifyController::default()
    };
    assert_eq!(
        IdentifyController::decode(&ctrl.to_bytes()[..]),
        Ok(ctrl.clone())
    );
    write(dir, "controller", &ctrl.to_bytes()[..]);

    let ns = IdentifyNamespace {
        nsze: 0x20_0000,
        ncap: 0x20_0000,
        nuse: 0x20_0000,
        nlbaf: 1,
        flbas: 0,
        dlfeat: 0x09,
        nguid: *b"fabrik-nguid-001",
        eui64: *b"fabrik01",
        lbaf: vec![
            LbaFormat {
                ms: 0,
                lbads: 9,
                rp: 0,
            },
            LbaFormat {
                ms: 0,
                lbads: 12,
                rp: 0,
            },
        ],
        ..IdentifyNamespace::default()
    };
    assert_eq!(
        IdentifyNamespace::decode(&ns.to_bytes()[..]),
        Ok(ns.clone())
    );
    write(dir, "namespace", &ns.to_bytes()[..]);

    let mut buf = [0u8; IDENTIFY_LEN];
    encode_ns_list(&[1, 2, 5, 32], &mut buf);
    write(dir, "ns-list", &buf);

    let mut buf = [0u8; IDENTIFY_LEN];
    let descs = [
        NsDescriptor::Eui64(*b"fabrik01"),
        NsDescriptor::Nguid(*b"fabrik-nguid-001"),
        NsDescriptor::Uuid(HOST_ID),
        NsDescriptor::Csi(0),
    ];
    encode_ns_descriptors(&descs, &mut buf);
    write(dir, "ns-descriptors", &buf);
}

// ---- log_pages ----

fn log_pages(dir: &Path) {
    let smart = SmartLog {
        temperature_k: 310,
        available_spare: 100,
        available_spare_threshold: 10,
        data_units_read: 12345,
        data_units_written: 6789,
        host_read_commands: 1 << 40,
        power_cycles: 3,
        power_on_hours: 100,
        temp_sensors: [310, 0, 0, 0, 0, 0, 0, 0],
        ..SmartLog::default()
    };
    let mut buf = [0u8; SMART_LOG_LEN];
    smart.encode(&mut buf);
    write(dir, "smart", &buf);

    let err = ErrorLogEntry {
        error_count: 1,
        sqid: 1,
        cid: 0x2001,
        status_field: Status::LBA_OUT_OF_RANGE.to_wire(false),
        param_error_location: 0xffff,
        lba: 0x10_0000,
        nsid: 1,
        trtype: Transport::Tcp.trtype(),
        ..ErrorLogEntry::default()
    };
    let mut buf = [0u8; ERROR_LOG_ENTRY_LEN];
    err.encode(&mut buf);
    write(dir, "error-entry", &buf);

    let mut fw = FirmwareSlotLog {
        afi: 1,
        ..FirmwareSlotLog::default()
    };
    fw.slots[0] = "0.1.0".into();
    let mut buf = [0u8; FIRMWARE_SLOT_LOG_LEN];
    fw.encode(&mut buf);
    write(dir, "firmware-slots", &buf);

    let mut buf = [0u8; CHANGED_NS_LIST_LEN];
    encode_changed_ns_list(&[1, 3, 4], &mut buf);
    write(dir, "changed-ns-list", &buf);

    let entries = [
        DiscoveryLogEntry {
            trtype: Transport::Tcp.trtype(),
            adrfam: adrfam::IPV4,
            subtype: subtype::CURRENT_DISCOVERY,
            treq: 0x02,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            eflags: 0x3,
            trsvcid: "8009".into(),
            subnqn: "nqn.2014-08.org.nvmexpress.discovery".into(),
            traddr: "127.0.0.1".into(),
            tsas: Tsas::Tcp { sectype: 0 },
        },
        DiscoveryLogEntry {
            trtype: Transport::Tcp.trtype(),
            adrfam: adrfam::IPV6,
            subtype: subtype::NVM,
            treq: 0x02,
            portid: 2,
            cntlid: 0xffff,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4420".into(),
            subnqn: SUBNQN.into(),
            traddr: "::1".into(),
            tsas: Tsas::Tcp { sectype: 0 },
        },
    ];
    let page = encode_discovery_log(7, &entries);
    assert_eq!(
        decode_discovery_log(&page).map(|(_, e)| e),
        Ok(entries.to_vec())
    );
    write(dir, "discovery-log-2", &page);
    let mut buf = [0u8; DISCOVERY_ENTRY_LEN];
    entries[1].encode(&mut buf);
    write(dir, "discovery-entry", &buf);
}

// ---- cqe_sgl: a CQE or an SGL descriptor (16 bytes each) ----

fn cqe_sgl(dir: &Path) {
    let mut connected = Cqe::new(0, Status::SUCCESS);
    connected.result = 1;
    connected.sqhd = 1;
    write(dir, "cqe-connect-ok", &connected.to_bytes());
    let mut invalid = Cqe::new(0x2001, Status::CONNECT_INVALID_PARAMETERS);
    invalid.result = 1 << 16 | 256;
    invalid.sqid = 1;
    write(dir, "cqe-connect-invalid-subnqn", &invalid.to_bytes());
    write(
        dir,
        "sgl-tcp-transport",
        &SglDescriptor::TransportDataBlock { length: 4096 }.encode(),
    );
    write(
        dir,
        "sgl-in-capsule",
        &SglDescriptor::DataBlockOffset {
            offset: 0,
            length: 1024,
        }
        .encode(),
    );
    let keyed = SglDescriptor::KeyedDataBlock {
        address: 0xffff_8880_1234_0000,
        length: 4096,
        key: 0x1234,
        invalidate: true,
    };
    write(dir, "sgl-rdma-keyed", &keyed.encode());
}

// ---- rdma_cm: NVMe/RDMA CM private data (request, accept, reject) ----

fn rdma_cm(dir: &Path) {
    // The Linux host's admin queue request, padded by the CM to 56 bytes.
    let admin = CmRequest {
        recfmt: 0,
        qid: 0,
        hrqsize: 32,
        hsqsize: 31,
        cntlid: 0,
    };
    let mut padded = admin.to_bytes().to_vec();
    padded.resize(56, 0);
    assert_eq!(CmRequest::parse(&padded), Ok(admin));
    write(dir, "request-admin-padded", &padded);
    let io = CmRequest {
        qid: 1,
        hrqsize: 128,
        hsqsize: 127,
        cntlid: 1,
        ..admin
    };
    write(dir, "request-io", &io.to_bytes());
    write(dir, "accept-128", &CmAccept::new(128).to_bytes());
    let reject = CmReject::new(RejectStatus::INVALID_HSQSIZE);
    assert_eq!(CmReject::parse(&reject.to_bytes()), Ok(reject));
    write(dir, "reject-hsqsize", &reject.to_bytes());
}

// ---- auth_messages: a config byte, then length-prefixed messages ----

fn auth_messages(dir: &Path) {
    use fabrik_proto::auth::message::Offer;
    use fabrik_proto::auth::Message;
    let negotiate = Message::Negotiate {
        t_id: 0,
        sc_c: 0,
        dhchap: Some(Offer {
            hashes: vec![1, 2, 3],
            dhgroups: vec![0, 1, 2, 3, 4, 5],
        }),
    };
    let reply = Message::Reply {
        t_id: 0,
        response: vec![0x5a; 64],
        challenge: Some(vec![0xc2; 64]),
        seqnum: 1,
        public: vec![],
    };
    let stream = |config: u8, messages: &[&Message]| {
        let mut out = vec![config];
        for m in messages {
            let b = m.encode();
            out.extend_from_slice(&(b.len() as u16).to_le_bytes());
            out.extend_from_slice(&b);
        }
        out
    };
    write(
        dir,
        "negotiate-reply-null",
        &stream(0, &[&negotiate, &reply]),
    );
    write(
        dir,
        "negotiate-twice-ffdhe",
        &stream(1, &[&negotiate, &negotiate]),
    );
    write(
        dir,
        "success2-alone",
        &stream(0, &[&Message::Success2 { t_id: 0 }]),
    );
}
