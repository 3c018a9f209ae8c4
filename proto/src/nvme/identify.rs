//! Identify data structures (4096 bytes each): controller, namespace, active namespace ID list,
//! namespace identification descriptors.

use crate::error::{need, DecodeError};
use crate::le::*;

pub const IDENTIFY_LEN: usize = 4096;

/// Identify Controller (CNS 01h). Offsets per NVMe base spec 2.0 (see NVMEOF-FACTS 4.2).
/// Only fields a fabrics controller fills are named; the rest encode as zero.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct IdentifyController {
    pub vid: u16,         // 0
    pub ssvid: u16,       // 2
    pub serial: String,   // 4..24, space padded
    pub model: String,    // 24..64, space padded
    pub firmware: String, // 64..72, space padded
    pub rab: u8,          // 72
    pub ieee: [u8; 3],    // 73
    pub cmic: u8,         // 76
    pub mdts: u8,         // 77
    pub cntlid: u16,      // 78
    pub ver: u32,         // 80
    pub rtd3r: u32,       // 84
    pub rtd3e: u32,       // 88
    pub oaes: u32,        // 92 (bits: `features::aec`, which shares them)
    pub ctratt: u32,      // 96
    pub cntrltype: u8,    // 111
    pub fguid: [u8; 16],  // 112
    pub oacs: u16,        // 256
    pub acl: u8,          // 258
    pub aerl: u8,         // 259
    pub frmw: u8,         // 260
    pub lpa: u8,          // 261
    pub elpe: u8,         // 262
    pub npss: u8,         // 263
    pub avscc: u8,        // 264
    pub apsta: u8,        // 265
    pub wctemp: u16,      // 266
    pub cctemp: u16,      // 268
    pub kas: u16,         // 320
    pub anatt: u8,        // 342
    pub anacap: u8,       // 343 (bits: `anacap`)
    pub anagrpmax: u32,   // 344
    pub nanagrpid: u32,   // 348
    pub sqes: u8,         // 512
    pub cqes: u8,         // 513
    pub maxcmd: u16,      // 514
    pub nn: u32,          // 516
    pub oncs: u16,        // 520
    pub fuses: u16,       // 522
    pub fna: u8,          // 524
    pub vwc: u8,          // 525
    pub awun: u16,        // 526
    pub awupf: u16,       // 528
    pub sgls: u32,        // 536 (bits: `sgls`)
    pub mnan: u32,        // 540
    pub subnqn: String,   // 768..1024, NUL padded
    pub ioccsz: u32,      // 1792
    pub iorcsz: u32,      // 1796
    pub icdoff: u16,      // 1800
    pub fcatt: u8,        // 1802
    pub msdbd: u8,        // 1803
    pub ofcs: u16,        // 1804
    pub dctype: u8,       // 1806 (`dctype`; a discovery controller's kind, TP8010)
    /// Power state 0 descriptor (2048..2080): max power in centiwatts.
    pub ps0_max_power_cw: u16,
}

/// Identify Controller SGLS bits.
pub mod sgls {
    /// SGLs supported, without alignment requirements (bits 1:0 = 01b).
    pub const SUPPORTED: u32 = 1 << 0;
    /// Keyed SGL Data Block descriptors: host memory the controller accesses remotely.
    pub const KEYED: u32 = 1 << 2;
    /// SGL Data Block descriptors with an offset: data in the command capsule.
    pub const OFFSET: u32 = 1 << 20;
}

/// Identify Controller DCTYPE values. Hosts (libnvme, nvme-stas) register with a discovery
/// controller (TP8010) only when it reports DDC or CDC.
pub mod dctype {
    pub const NOT_REPORTED: u8 = 0;
    /// Direct Discovery Controller: the discovery controller of an NVM subsystem.
    pub const DDC: u8 = 1;
    /// Central Discovery Controller: hosts and DDCs register with it.
    pub const CDC: u8 = 2;
}

/// Identify Controller CMIC bits.
pub mod cmic {
    /// More than one port may reach the subsystem.
    pub const MULTI_PORT: u8 = 1 << 0;
    /// More than one controller may be live at once (required for a host's second path).
    pub const MULTI_CONTROLLER: u8 = 1 << 1;
    /// Asymmetric namespace access reporting (the ANA log page, ANAGRPID).
    pub const ANA_REPORTING: u8 = 1 << 3;
}

/// Identify Controller ANACAP bits: the ANA states the controller may report.
pub mod anacap {
    pub const OPTIMIZED: u8 = 1 << 0;
    pub const NON_OPTIMIZED: u8 = 1 << 1;
    pub const INACCESSIBLE: u8 = 1 << 2;
    pub const PERSISTENT_LOSS: u8 = 1 << 3;
    pub const CHANGE: u8 = 1 << 4;
    /// A namespace's ANAGRPID does not change while it is attached.
    pub const GRPID_FIXED: u8 = 1 << 6;
}

impl IdentifyController {
    /// Writes the whole 4 KiB; unnamed fields are zero.
    pub fn encode(&self, buf: &mut [u8; IDENTIFY_LEN]) {
        buf.fill(0);
        put_u16(buf, 0, self.vid);
        put_u16(buf, 2, self.ssvid);
        put_ascii(buf, 4, 20, &self.serial, b' ');
        put_ascii(buf, 24, 40, &self.model, b' ');
        put_ascii(buf, 64, 8, &self.firmware, b' ');
        buf[72] = self.rab;
        buf[73..76].copy_from_slice(&self.ieee);
        buf[76] = self.cmic;
        buf[77] = self.mdts;
        put_u16(buf, 78, self.cntlid);
        put_u32(buf, 80, self.ver);
        put_u32(buf, 84, self.rtd3r);
        put_u32(buf, 88, self.rtd3e);
        put_u32(buf, 92, self.oaes);
        put_u32(buf, 96, self.ctratt);
        buf[111] = self.cntrltype;
        buf[112..128].copy_from_slice(&self.fguid);
        put_u16(buf, 256, self.oacs);
        buf[258] = self.acl;
        buf[259] = self.aerl;
        buf[260] = self.frmw;
        buf[261] = self.lpa;
        buf[262] = self.elpe;
        buf[263] = self.npss;
        buf[264] = self.avscc;
        buf[265] = self.apsta;
        put_u16(buf, 266, self.wctemp);
        put_u16(buf, 268, self.cctemp);
        put_u16(buf, 320, self.kas);
        buf[342] = self.anatt;
        buf[343] = self.anacap;
        put_u32(buf, 344, self.anagrpmax);
        put_u32(buf, 348, self.nanagrpid);
        buf[512] = self.sqes;
        buf[513] = self.cqes;
        put_u16(buf, 514, self.maxcmd);
        put_u32(buf, 516, self.nn);
        put_u16(buf, 520, self.oncs);
        put_u16(buf, 522, self.fuses);
        buf[524] = self.fna;
        buf[525] = self.vwc;
        put_u16(buf, 526, self.awun);
        put_u16(buf, 528, self.awupf);
        put_u32(buf, 536, self.sgls);
        put_u32(buf, 540, self.mnan);
        put_ascii(buf, 768, 256, &self.subnqn, 0);
        put_u32(buf, 1792, self.ioccsz);
        put_u32(buf, 1796, self.iorcsz);
        put_u16(buf, 1800, self.icdoff);
        buf[1802] = self.fcatt;
        buf[1803] = self.msdbd;
        put_u16(buf, 1804, self.ofcs);
        buf[1806] = self.dctype;
        put_u16(buf, 2048, self.ps0_max_power_cw);
    }
    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_LEN]> {
        let mut b = Box::new([0u8; IDENTIFY_LEN]);
        self.encode(&mut b);
        b
    }
    /// Decodes the named fields. Text must be printable ASCII (SUBNQN: UTF-8 without control
    /// characters). Unnamed and reserved bytes are not checked: real controllers fill fields
    /// this struct does not name (the Linux target: ANA fields, power state latencies), newer
    /// spec revisions give meaning to reserved bytes, and the spec has receivers ignore them.
    pub fn decode(buf: &[u8]) -> Result<IdentifyController, DecodeError> {
        const WHAT: &str = "Identify Controller";
        need(WHAT, buf, IDENTIFY_LEN)?;
        Ok(IdentifyController {
            vid: u16_at(buf, 0),
            ssvid: u16_at(buf, 2),
            serial: ascii_field(WHAT, buf, 4, 20)?,
            model: ascii_field(WHAT, buf, 24, 40)?,
            firmware: ascii_field(WHAT, buf, 64, 8)?,
            rab: buf[72],
            ieee: buf[73..76].try_into().unwrap(),
            cmic: buf[76],
            mdts: buf[77],
            cntlid: u16_at(buf, 78),
            ver: u32_at(buf, 80),
            rtd3r: u32_at(buf, 84),
            rtd3e: u32_at(buf, 88),
            oaes: u32_at(buf, 92),
            ctratt: u32_at(buf, 96),
            cntrltype: buf[111],
            fguid: buf[112..128].try_into().unwrap(),
            oacs: u16_at(buf, 256),
            acl: buf[258],
            aerl: buf[259],
            frmw: buf[260],
            lpa: buf[261],
            elpe: buf[262],
            npss: buf[263],
            avscc: buf[264],
            apsta: buf[265],
            wctemp: u16_at(buf, 266),
            cctemp: u16_at(buf, 268),
            kas: u16_at(buf, 320),
            anatt: buf[342],
            anacap: buf[343],
            anagrpmax: u32_at(buf, 344),
            nanagrpid: u32_at(buf, 348),
            sqes: buf[512],
            cqes: buf[513],
            maxcmd: u16_at(buf, 514),
            nn: u32_at(buf, 516),
            oncs: u16_at(buf, 520),
            fuses: u16_at(buf, 522),
            fna: buf[524],
            vwc: buf[525],
            awun: u16_at(buf, 526),
            awupf: u16_at(buf, 528),
            sgls: u32_at(buf, 536),
            mnan: u32_at(buf, 540),
            subnqn: utf8_field(WHAT, buf, 768, 256)?,
            ioccsz: u32_at(buf, 1792),
            iorcsz: u32_at(buf, 1796),
            icdoff: u16_at(buf, 1800),
            fcatt: buf[1802],
            msdbd: buf[1803],
            ofcs: u16_at(buf, 1804),
            dctype: buf[1806],
            ps0_max_power_cw: u16_at(buf, 2048),
        })
    }
}

/// One LBA format (4 bytes at 128 + 4*n): metadata size 15:0, LBADS 23:16 (log2 of the LBA size),
/// relative performance 25:24.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct LbaFormat {
    pub ms: u16,
    pub lbads: u8,
    pub rp: u8,
}

/// Identify Namespace (CNS 00h). An all-default value (NCAP 0) is what inactive NSIDs return.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct IdentifyNamespace {
    pub nsze: u64,       // 0
    pub ncap: u64,       // 8
    pub nuse: u64,       // 16
    pub nsfeat: u8,      // 24
    pub nlbaf: u8,       // 25 (0's based count of formats)
    pub flbas: u8,       // 26
    pub mc: u8,          // 27
    pub dpc: u8,         // 28
    pub dps: u8,         // 29
    pub nmic: u8,        // 30
    pub rescap: u8,      // 31
    pub fpi: u8,         // 32
    pub dlfeat: u8,      // 33
    pub nawun: u16,      // 34
    pub nawupf: u16,     // 36
    pub nacwu: u16,      // 38
    pub nabsn: u16,      // 40
    pub nabo: u16,       // 42
    pub nabspf: u16,     // 44
    pub noiob: u16,      // 46
    pub nvmcap: u128,    // 48
    pub npwg: u16,       // 64
    pub npwa: u16,       // 66
    pub npdg: u16,       // 68
    pub npda: u16,       // 70
    pub nows: u16,       // 72
    pub anagrpid: u32,   // 92
    pub nsattr: u8,      // 99
    pub nvmsetid: u16,   // 100
    pub nguid: [u8; 16], // 104
    pub eui64: [u8; 8],  // 120
    /// LBA formats 0..=nlbaf (at most 64), at 128.
    pub lbaf: Vec<LbaFormat>,
}

/// Offset of LBA format 0 in Identify Namespace.
pub const LBAF_OFFSET: usize = 128;
/// Most LBA formats Identify Namespace can hold (NLBAF is 0's based, at most 63).
pub const MAX_LBAF: usize = 64;

impl IdentifyNamespace {
    /// Writes the whole 4 KiB. NLBAF is `lbaf.len() - 1` when `lbaf` is non-empty (at most 64
    /// formats are written), else `nlbaf` as given.
    pub fn encode(&self, buf: &mut [u8; IDENTIFY_LEN]) {
        buf.fill(0);
        put_u64(buf, 0, self.nsze);
        put_u64(buf, 8, self.ncap);
        put_u64(buf, 16, self.nuse);
        buf[24] = self.nsfeat;
        let lbaf = &self.lbaf[..self.lbaf.len().min(MAX_LBAF)];
        buf[25] = if lbaf.is_empty() {
            self.nlbaf
        } else {
            (lbaf.len() - 1) as u8
        };
        buf[26] = self.flbas;
        buf[27] = self.mc;
        buf[28] = self.dpc;
        buf[29] = self.dps;
        buf[30] = self.nmic;
        buf[31] = self.rescap;
        buf[32] = self.fpi;
        buf[33] = self.dlfeat;
        put_u16(buf, 34, self.nawun);
        put_u16(buf, 36, self.nawupf);
        put_u16(buf, 38, self.nacwu);
        put_u16(buf, 40, self.nabsn);
        put_u16(buf, 42, self.nabo);
        put_u16(buf, 44, self.nabspf);
        put_u16(buf, 46, self.noiob);
        put_u128(buf, 48, self.nvmcap);
        put_u16(buf, 64, self.npwg);
        put_u16(buf, 66, self.npwa);
        put_u16(buf, 68, self.npdg);
        put_u16(buf, 70, self.npda);
        put_u16(buf, 72, self.nows);
        put_u32(buf, 92, self.anagrpid);
        buf[99] = self.nsattr;
        put_u16(buf, 100, self.nvmsetid);
        buf[104..120].copy_from_slice(&self.nguid);
        buf[120..128].copy_from_slice(&self.eui64);
        for (i, f) in lbaf.iter().enumerate() {
            let off = LBAF_OFFSET + 4 * i;
            put_u16(buf, off, f.ms);
            buf[off + 2] = f.lbads;
            buf[off + 3] = f.rp & 0x3;
        }
    }
    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_LEN]> {
        let mut b = Box::new([0u8; IDENTIFY_LEN]);
        self.encode(&mut b);
        b
    }
    /// Decodes the named fields and NLBAF + 1 LBA formats. NLBAF above 63 is an error (offset
    /// 25). A single all-zero format (LBADS 0 means "no format") decodes as an empty list, so
    /// the all-zero structure of an inactive NSID decodes to `IdentifyNamespace::default()`.
    /// Unnamed and reserved bytes are not checked (see `IdentifyController::decode`).
    pub fn decode(buf: &[u8]) -> Result<IdentifyNamespace, DecodeError> {
        const WHAT: &str = "Identify Namespace";
        need(WHAT, buf, IDENTIFY_LEN)?;
        let nlbaf = buf[25];
        if nlbaf as usize >= MAX_LBAF {
            return Err(DecodeError::field(WHAT, 25, "NLBAF above 63"));
        }
        let mut lbaf: Vec<LbaFormat> = (0..=nlbaf as usize)
            .map(|i| {
                let off = LBAF_OFFSET + 4 * i;
                LbaFormat {
                    ms: u16_at(buf, off),
                    lbads: buf[off + 2],
                    rp: buf[off + 3] & 0x3,
                }
            })
            .collect();
        if nlbaf == 0 && lbaf[0] == LbaFormat::default() {
            lbaf.clear();
        }
        Ok(IdentifyNamespace {
            nsze: u64_at(buf, 0),
            ncap: u64_at(buf, 8),
            nuse: u64_at(buf, 16),
            nsfeat: buf[24],
            nlbaf,
            flbas: buf[26],
            mc: buf[27],
            dpc: buf[28],
            dps: buf[29],
            nmic: buf[30],
            rescap: buf[31],
            fpi: buf[32],
            dlfeat: buf[33],
            nawun: u16_at(buf, 34),
            nawupf: u16_at(buf, 36),
            nacwu: u16_at(buf, 38),
            nabsn: u16_at(buf, 40),
            nabo: u16_at(buf, 42),
            nabspf: u16_at(buf, 44),
            noiob: u16_at(buf, 46),
            nvmcap: u128_at(buf, 48),
            npwg: u16_at(buf, 64),
            npwa: u16_at(buf, 66),
            npdg: u16_at(buf, 68),
            npda: u16_at(buf, 70),
            nows: u16_at(buf, 72),
            anagrpid: u32_at(buf, 92),
            nsattr: buf[99],
            nvmsetid: u16_at(buf, 100),
            nguid: buf[104..120].try_into().unwrap(),
            eui64: buf[120..128].try_into().unwrap(),
            lbaf,
        })
    }
    /// LBA size in bytes of the formatted LBA format (FLBAS 3:0), or None if out of range.
    pub fn lba_size(&self) -> Option<u32> {
        let f = self.lbaf.get((self.flbas & 0xf) as usize)?;
        (9..=16).contains(&f.lbads).then(|| 1u32 << f.lbads)
    }
}

/// Active namespace ID list (CNS 02h): up to 1024 ascending NSIDs, zero-terminated.
/// Most NSIDs one list holds.
pub const NS_LIST_MAX: usize = IDENTIFY_LEN / 4;

/// The caller passes ascending non-zero NSIDs; only the first 1024 are written (the host asks
/// again from the last one it saw).
pub fn encode_ns_list(nsids: &[u32], buf: &mut [u8; IDENTIFY_LEN]) {
    buf.fill(0);
    for (i, &nsid) in nsids.iter().take(NS_LIST_MAX).enumerate() {
        put_u32(buf, 4 * i, nsid);
    }
}

/// Decodes an NSID list; errors if the list is not strictly ascending.
pub fn decode_ns_list(buf: &[u8]) -> Result<Vec<u32>, DecodeError> {
    const WHAT: &str = "namespace list";
    need(WHAT, buf, IDENTIFY_LEN)?;
    let mut list = Vec::new();
    for i in 0..NS_LIST_MAX {
        let nsid = u32_at(buf, 4 * i);
        if nsid == 0 {
            break;
        }
        if list.last().is_some_and(|&last| nsid <= last) {
            return Err(DecodeError::field(
                WHAT,
                4 * i,
                "NSIDs not strictly ascending",
            ));
        }
        list.push(nsid);
    }
    Ok(list)
}

/// Namespace identification descriptor (CNS 03h): NIDT 0, NIDL 1, reserved 2..4, then NIDL bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NsDescriptor {
    Eui64([u8; 8]),
    Nguid([u8; 16]),
    Uuid([u8; 16]),
    Csi(u8),
}

/// Encodes the list, terminated by a zero NIDT/NIDL (the rest of the 4 KiB buffer zeroed).
/// Namespace identifier types (NIDT).
pub mod nidt {
    pub const EUI64: u8 = 1;
    pub const NGUID: u8 = 2;
    pub const UUID: u8 = 3;
    pub const CSI: u8 = 4;
}

/// Header of a namespace identification descriptor: NIDT, NIDL, 2 reserved bytes.
const NS_DESC_HEADER: usize = 4;

impl NsDescriptor {
    /// NIDT of this descriptor.
    pub fn nidt(&self) -> u8 {
        match self {
            NsDescriptor::Eui64(_) => nidt::EUI64,
            NsDescriptor::Nguid(_) => nidt::NGUID,
            NsDescriptor::Uuid(_) => nidt::UUID,
            NsDescriptor::Csi(_) => nidt::CSI,
        }
    }
    /// The identifier bytes (NIDL of them).
    pub fn id(&self) -> &[u8] {
        match self {
            NsDescriptor::Eui64(v) => v,
            NsDescriptor::Nguid(v) | NsDescriptor::Uuid(v) => v,
            NsDescriptor::Csi(v) => std::slice::from_ref(v),
        }
    }
}

/// Entries follow each other without padding (each is 4 + NIDL bytes). Entries that would not
/// fit in the 4 KiB are dropped.
pub fn encode_ns_descriptors(descs: &[NsDescriptor], buf: &mut [u8; IDENTIFY_LEN]) {
    buf.fill(0);
    let mut off = 0;
    for d in descs {
        let id = d.id();
        let end = off + NS_DESC_HEADER + id.len();
        if end > IDENTIFY_LEN {
            break;
        }
        buf[off] = d.nidt();
        buf[off + 1] = id.len() as u8;
        buf[off + NS_DESC_HEADER..end].copy_from_slice(id);
        off = end;
    }
}

/// Decodes until a zero-length descriptor; wrong NIDL for a known NIDT or an unknown NIDT is an error.
/// The list also ends at the end of the 4 KiB. The reserved bytes 2..4 of each entry are not
/// checked (the spec has receivers ignore reserved fields).
pub fn decode_ns_descriptors(buf: &[u8]) -> Result<Vec<NsDescriptor>, DecodeError> {
    const WHAT: &str = "namespace identification descriptor list";
    need(WHAT, buf, IDENTIFY_LEN)?;
    let buf = &buf[..IDENTIFY_LEN];
    let mut descs = Vec::new();
    let mut off = 0;
    while off + NS_DESC_HEADER <= IDENTIFY_LEN {
        let (ty, len) = (buf[off], buf[off + 1] as usize);
        if ty == 0 {
            break;
        }
        let want = match ty {
            nidt::EUI64 => 8,
            nidt::NGUID | nidt::UUID => 16,
            nidt::CSI => 1,
            _ => return Err(DecodeError::field(WHAT, off, "unknown NIDT")),
        };
        if len != want {
            return Err(DecodeError::field(WHAT, off + 1, "NIDL wrong for NIDT"));
        }
        let start = off + NS_DESC_HEADER;
        if start + len > IDENTIFY_LEN {
            return Err(DecodeError::field(
                WHAT,
                off,
                "descriptor runs past the end",
            ));
        }
        let id = &buf[start..start + len];
        descs.push(match ty {
            nidt::EUI64 => NsDescriptor::Eui64(id.try_into().unwrap()),
            nidt::NGUID => NsDescriptor::Nguid(id.try_into().unwrap()),
            nidt::UUID => NsDescriptor::Uuid(id.try_into().unwrap()),
            _ => NsDescriptor::Csi(id[0]),
        });
        off = start + len;
    }
    Ok(descs)
}

/// Reads a fixed-width text field of printable ASCII: up to the first NUL, trailing spaces
/// dropped (both are padding). Any other byte is an error naming the field's offset.
pub(crate) fn ascii_field(
    what: &'static str,
    buf: &[u8],
    off: usize,
    len: usize,
) -> Result<String, DecodeError> {
    let field = &buf[off..off + len];
    let end = field.iter().position(|&c| c == 0).unwrap_or(len);
    let text = &field[..end];
    if !text.iter().all(|c| (0x20..=0x7e).contains(c)) {
        return Err(DecodeError::field(what, off, "text is not printable ASCII"));
    }
    Ok(ascii_at(buf, off, len))
}

/// As `ascii_field`, for NQN fields, which are UTF-8: no control characters.
pub(crate) fn utf8_field(
    what: &'static str,
    buf: &[u8],
    off: usize,
    len: usize,
) -> Result<String, DecodeError> {
    let field = &buf[off..off + len];
    let end = field.iter().position(|&c| c == 0).unwrap_or(len);
    let text = std::str::from_utf8(&field[..end])
        .map_err(|_| DecodeError::field(what, off, "text is not UTF-8"))?;
    if text.chars().any(char::is_control) {
        return Err(DecodeError::field(what, off, "text has control characters"));
    }
    Ok(text.trim_end_matches(' ').to_string())
}

#[cfg(test)]
pub(crate) mod tests;
