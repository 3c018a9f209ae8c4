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
    pub oaes: u32,        // 92
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
    pub sgls: u32,        // 536
    pub mnan: u32,        // 540
    pub subnqn: String,   // 768..1024, NUL padded
    pub ioccsz: u32,      // 1792
    pub iorcsz: u32,      // 1796
    pub icdoff: u16,      // 1800
    pub fcatt: u8,        // 1802
    pub msdbd: u8,        // 1803
    pub ofcs: u16,        // 1804
    /// Power state 0 descriptor (2048..2080): max power in centiwatts.
    pub ps0_max_power_cw: u16,
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
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Printable ASCII of at most `max` bytes with no trailing space (padding is stripped).
    pub(crate) fn text(max: usize) -> impl Strategy<Value = String> {
        proptest::string::string_regex(&format!("[ -~]{{0,{max}}}"))
            .unwrap()
            .prop_map(|s| s.trim_end().to_string())
    }

    fn any_ctrl() -> impl Strategy<Value = IdentifyController> {
        (
            (text(20), text(40), text(8), text(223)),
            any::<[u16; 14]>(),
            any::<[u32; 13]>(),
            any::<[u8; 24]>(),
            any::<[u8; 16]>(),
        )
            .prop_map(|((serial, model, firmware, subnqn), w, d, b, fguid)| {
                IdentifyController {
                    vid: w[0],
                    ssvid: w[1],
                    serial,
                    model,
                    firmware,
                    rab: b[0],
                    ieee: [b[1], b[2], b[3]],
                    cmic: b[4],
                    mdts: b[5],
                    cntlid: w[2],
                    ver: d[0],
                    rtd3r: d[1],
                    rtd3e: d[2],
                    oaes: d[3],
                    ctratt: d[4],
                    cntrltype: b[6],
                    fguid,
                    oacs: w[3],
                    acl: b[7],
                    aerl: b[8],
                    frmw: b[9],
                    lpa: b[10],
                    elpe: b[11],
                    npss: b[12],
                    avscc: b[13],
                    apsta: b[14],
                    wctemp: w[4],
                    cctemp: w[5],
                    kas: w[6],
                    sqes: b[15],
                    cqes: b[16],
                    maxcmd: w[7],
                    nn: d[5],
                    oncs: w[8],
                    fuses: w[9],
                    fna: b[17],
                    vwc: b[18],
                    awun: w[10],
                    awupf: w[11],
                    sgls: d[6],
                    mnan: d[7],
                    subnqn,
                    ioccsz: d[8],
                    iorcsz: d[9],
                    icdoff: w[12],
                    fcatt: b[19],
                    msdbd: b[20],
                    ofcs: w[13],
                    ps0_max_power_cw: d[10] as u16,
                }
            })
    }

    fn any_lbaf() -> impl Strategy<Value = LbaFormat> {
        (any::<u16>(), any::<u8>(), 0u8..4).prop_map(|(ms, lbads, rp)| LbaFormat { ms, lbads, rp })
    }

    fn any_ns() -> impl Strategy<Value = IdentifyNamespace> {
        (
            any::<[u64; 3]>(),
            any::<[u8; 13]>(),
            any::<[u16; 14]>(),
            any::<u128>(),
            any::<u32>(),
            any::<[u8; 16]>(),
            any::<[u8; 8]>(),
            // A single all-zero format is "no format" (see decode); keep LBADS non-zero.
            proptest::collection::vec(
                any_lbaf().prop_filter("format in use", |f| f.lbads != 0),
                1..=MAX_LBAF,
            ),
        )
            .prop_map(|(q, b, w, nvmcap, anagrpid, nguid, eui64, lbaf)| {
                IdentifyNamespace {
                    nsze: q[0],
                    ncap: q[1],
                    nuse: q[2],
                    nsfeat: b[0],
                    nlbaf: (lbaf.len() - 1) as u8,
                    flbas: b[1],
                    mc: b[2],
                    dpc: b[3],
                    dps: b[4],
                    nmic: b[5],
                    rescap: b[6],
                    fpi: b[7],
                    dlfeat: b[8],
                    nawun: w[0],
                    nawupf: w[1],
                    nacwu: w[2],
                    nabsn: w[3],
                    nabo: w[4],
                    nabspf: w[5],
                    noiob: w[6],
                    nvmcap,
                    npwg: w[7],
                    npwa: w[8],
                    npdg: w[9],
                    npda: w[10],
                    nows: w[11],
                    anagrpid,
                    nsattr: b[9],
                    nvmsetid: w[12],
                    nguid,
                    eui64,
                    lbaf,
                }
            })
    }

    fn any_desc() -> impl Strategy<Value = NsDescriptor> {
        prop_oneof![
            any::<[u8; 8]>().prop_map(NsDescriptor::Eui64),
            any::<[u8; 16]>().prop_map(NsDescriptor::Nguid),
            any::<[u8; 16]>().prop_map(NsDescriptor::Uuid),
            any::<u8>().prop_map(NsDescriptor::Csi),
        ]
    }

    proptest! {
        #[test]
        fn controller_round_trip(c in any_ctrl()) {
            prop_assert_eq!(IdentifyController::decode(&c.to_bytes()[..]), Ok(c));
        }

        #[test]
        fn namespace_round_trip(ns in any_ns()) {
            prop_assert_eq!(IdentifyNamespace::decode(&ns.to_bytes()[..]), Ok(ns));
        }

        #[test]
        fn ns_list_round_trip(set in proptest::collection::btree_set(1u32.., 0..=NS_LIST_MAX)) {
            let nsids: Vec<u32> = set.into_iter().collect();
            let mut b = [0u8; IDENTIFY_LEN];
            encode_ns_list(&nsids, &mut b);
            prop_assert_eq!(decode_ns_list(&b), Ok(nsids));
        }

        #[test]
        fn ns_descriptors_round_trip(descs in proptest::collection::vec(any_desc(), 0..40)) {
            let mut b = [0u8; IDENTIFY_LEN];
            encode_ns_descriptors(&descs, &mut b);
            prop_assert_eq!(decode_ns_descriptors(&b), Ok(descs));
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..=IDENTIFY_LEN + 8)) {
            if let Ok(c) = IdentifyController::decode(&bytes) {
                prop_assert_eq!(IdentifyController::decode(&c.to_bytes()[..]), Ok(c));
            }
            if let Ok(ns) = IdentifyNamespace::decode(&bytes) {
                let _ = ns.lba_size();
                prop_assert_eq!(IdentifyNamespace::decode(&ns.to_bytes()[..]).map(|n| n.nsze), Ok(ns.nsze));
            }
            let _ = decode_ns_list(&bytes);
            if let Ok(d) = decode_ns_descriptors(&bytes) {
                let mut b = [0u8; IDENTIFY_LEN];
                encode_ns_descriptors(&d, &mut b);
                prop_assert_eq!(decode_ns_descriptors(&b), Ok(d));
            }
        }

        #[test]
        fn sparse_descriptor_lists_never_panic(entries in proptest::collection::vec((0u8..6, 0u8..20, any::<u8>()), 0..300)) {
            // Mostly well-formed headers, to reach the deeper checks.
            let mut b = vec![0u8; IDENTIFY_LEN];
            let mut off = 0;
            for (t, l, fill) in entries {
                if off + 4 + l as usize > IDENTIFY_LEN {
                    break;
                }
                b[off] = t;
                b[off + 1] = l;
                b[off + 4..off + 4 + l as usize].fill(fill);
                off += 4 + l as usize;
            }
            let _ = decode_ns_descriptors(&b);
        }
    }

    #[test]
    fn controller_offsets() {
        let c = IdentifyController {
            vid: 0x1b36,
            serial: "SN1".into(),
            model: "fabrik".into(),
            firmware: "0.1".into(),
            cntlid: 0x1234,
            ver: 0x0001_0400,
            cntrltype: 1,
            kas: 10,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 128,
            nn: 32,
            sgls: 0x0010_0001,
            subnqn: "nqn.2024-01.io.fabrik:jbof".into(),
            ioccsz: 260,
            iorcsz: 1,
            msdbd: 1,
            ps0_max_power_cw: 2500,
            ..Default::default()
        };
        let b = c.to_bytes();
        assert_eq!(&b[0..2], &[0x36, 0x1b]);
        assert_eq!(&b[4..24], b"SN1                 ");
        assert_eq!(&b[24..30], b"fabrik");
        assert_eq!(b[30], b' ');
        assert_eq!(b[63], b' ');
        assert_eq!(&b[64..72], b"0.1     ");
        assert_eq!(&b[78..80], &[0x34, 0x12]);
        assert_eq!(&b[80..84], &[0x00, 0x04, 0x01, 0x00]);
        assert_eq!(b[111], 1);
        assert_eq!(&b[320..322], &[10, 0]);
        assert_eq!((b[512], b[513]), (0x66, 0x44));
        assert_eq!(&b[514..516], &[128, 0]);
        assert_eq!(&b[516..520], &[32, 0, 0, 0]);
        assert_eq!(&b[536..540], &[0x01, 0x00, 0x10, 0x00]);
        assert_eq!(&b[768..794], b"nqn.2024-01.io.fabrik:jbof");
        assert!(b[794..1024].iter().all(|&x| x == 0));
        assert_eq!(&b[1792..1796], &260u32.to_le_bytes());
        assert_eq!(&b[1796..1800], &1u32.to_le_bytes());
        assert_eq!(b[1803], 1);
        assert_eq!(&b[2048..2050], &2500u16.to_le_bytes());
        assert_eq!(IdentifyController::decode(&b[..]), Ok(c));
    }

    #[test]
    fn controller_decode_errors() {
        assert!(matches!(
            IdentifyController::decode(&[0u8; 4095]),
            Err(DecodeError::Short { .. })
        ));
        let mut b = IdentifyController::default().to_bytes();
        b[24] = 0xff;
        assert_eq!(IdentifyController::decode(&b[..]).unwrap_err().offset(), 24);
        let mut b = IdentifyController::default().to_bytes();
        b[4] = b'\n';
        assert_eq!(IdentifyController::decode(&b[..]).unwrap_err().offset(), 4);
        let mut b = IdentifyController::default().to_bytes();
        b[768] = 0xc3;
        assert_eq!(
            IdentifyController::decode(&b[..]).unwrap_err().offset(),
            768
        );
        // Unnamed fields (e.g. the Linux target's ANATT at 342) are accepted.
        let mut b = IdentifyController::default().to_bytes();
        b[342] = 10;
        b[1200] = 1;
        assert_eq!(
            IdentifyController::decode(&b[..]),
            Ok(IdentifyController::default())
        );
        // UTF-8 in SUBNQN is fine; NUL padding and a full 256-byte field both decode.
        let c = IdentifyController {
            subnqn: "nqn.2024-01.io.fabrik:gr\u{fc}n".into(),
            ..Default::default()
        };
        assert_eq!(IdentifyController::decode(&c.to_bytes()[..]), Ok(c));
        let mut b = IdentifyController::default().to_bytes();
        b[768..1024].fill(b'a');
        assert_eq!(
            IdentifyController::decode(&b[..]).unwrap().subnqn.len(),
            256
        );
    }

    #[test]
    fn namespace_offsets() {
        let ns = IdentifyNamespace {
            nsze: 0x1000,
            ncap: 0x1000,
            nuse: 0x800,
            nlbaf: 1,
            flbas: 1,
            nmic: 1,
            nawupf: 7,
            noiob: 0x100,
            npwg: 3,
            nows: 5,
            anagrpid: 9,
            nsattr: 1,
            nguid: [0xaa; 16],
            eui64: [0xbb; 8],
            lbaf: vec![
                LbaFormat {
                    ms: 0,
                    lbads: 9,
                    rp: 0,
                },
                LbaFormat {
                    ms: 8,
                    lbads: 12,
                    rp: 2,
                },
            ],
            ..Default::default()
        };
        let b = ns.to_bytes();
        assert_eq!(&b[0..8], &0x1000u64.to_le_bytes());
        assert_eq!(&b[8..16], &0x1000u64.to_le_bytes());
        assert_eq!(&b[16..24], &0x800u64.to_le_bytes());
        assert_eq!((b[25], b[26], b[30]), (1, 1, 1));
        assert_eq!(&b[36..38], &[7, 0]);
        assert_eq!(&b[46..48], &[0, 1]);
        assert_eq!(&b[64..66], &[3, 0]);
        assert_eq!(&b[72..74], &[5, 0]);
        assert_eq!(&b[92..96], &[9, 0, 0, 0]);
        assert_eq!(b[99], 1);
        assert_eq!(&b[104..120], &[0xaa; 16]);
        assert_eq!(&b[120..128], &[0xbb; 8]);
        assert_eq!(&b[128..132], &[0, 0, 9, 0]);
        assert_eq!(&b[132..136], &[8, 0, 12, 2]);
        let d = IdentifyNamespace::decode(&b[..]).unwrap();
        assert_eq!(d.lba_size(), Some(4096));
        assert_eq!(d, ns);
    }

    #[test]
    fn namespace_lbaf_edge_cases() {
        // Inactive NSID: all zero, both ways.
        let zero = [0u8; IDENTIFY_LEN];
        assert_eq!(
            IdentifyNamespace::decode(&zero),
            Ok(IdentifyNamespace::default())
        );
        assert_eq!(&IdentifyNamespace::default().to_bytes()[..], &zero[..]);
        assert_eq!(IdentifyNamespace::default().lba_size(), None);
        // NLBAF 63 reads 64 formats; 64 is an error at byte 25.
        let mut b = [0u8; IDENTIFY_LEN];
        b[25] = 63;
        assert_eq!(IdentifyNamespace::decode(&b).unwrap().lbaf.len(), 64);
        b[25] = 64;
        assert_eq!(IdentifyNamespace::decode(&b).unwrap_err().offset(), 25);
        // More than 64 formats: only 64 written.
        let ns = IdentifyNamespace {
            lbaf: vec![
                LbaFormat {
                    ms: 0,
                    lbads: 9,
                    rp: 0
                };
                70
            ],
            ..Default::default()
        };
        let b = ns.to_bytes();
        assert_eq!(b[25], 63);
        assert_eq!(IdentifyNamespace::decode(&b[..]).unwrap().lbaf.len(), 64);
        // lba_size: FLBAS 3:0 picks the format; LBADS must be 9..=16.
        let mut ns = IdentifyNamespace {
            lbaf: vec![
                LbaFormat {
                    lbads: 9,
                    ..Default::default()
                },
                LbaFormat {
                    lbads: 8,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(ns.lba_size(), Some(512));
        ns.flbas = 0x11; // bit 4 (metadata at end) is not part of the index
        assert_eq!(ns.lba_size(), None);
        ns.flbas = 2;
        assert_eq!(ns.lba_size(), None);
        ns.lbaf[0].lbads = 16;
        ns.flbas = 0x10;
        assert_eq!(ns.lba_size(), Some(65536));
        ns.lbaf[0].lbads = 17;
        assert_eq!(ns.lba_size(), None);
    }

    #[test]
    fn ns_list_bytes() {
        let mut b = [0u8; IDENTIFY_LEN];
        encode_ns_list(&[1, 2, 7], &mut b);
        assert_eq!(&b[..16], &[1, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        // Only 1024 fit; a full page has no terminator.
        let many: Vec<u32> = (1..=2000).collect();
        encode_ns_list(&many, &mut b);
        assert_eq!(decode_ns_list(&b).unwrap(), (1..=1024).collect::<Vec<_>>());
        // Not ascending: error at the offending entry.
        encode_ns_list(&[1, 5, 5], &mut b);
        assert_eq!(decode_ns_list(&b).unwrap_err().offset(), 8);
        encode_ns_list(&[3, 2], &mut b);
        assert_eq!(decode_ns_list(&b).unwrap_err().offset(), 4);
        // Entries after the terminator are ignored.
        encode_ns_list(&[1, 0, 9], &mut b);
        assert_eq!(decode_ns_list(&b), Ok(vec![1]));
        assert!(matches!(
            decode_ns_list(&b[..100]),
            Err(DecodeError::Short { .. })
        ));
    }

    #[test]
    fn ns_descriptor_bytes() {
        let descs = [
            NsDescriptor::Nguid([0x11; 16]),
            NsDescriptor::Csi(0),
            NsDescriptor::Eui64([0x22; 8]),
        ];
        let mut b = [0u8; IDENTIFY_LEN];
        encode_ns_descriptors(&descs, &mut b);
        assert_eq!(&b[0..4], &[2, 16, 0, 0]);
        assert_eq!(&b[4..20], &[0x11; 16]);
        assert_eq!(&b[20..25], &[4, 1, 0, 0, 0]);
        assert_eq!(&b[25..29], &[1, 8, 0, 0]);
        assert_eq!(&b[29..37], &[0x22; 8]);
        assert!(b[37..].iter().all(|&x| x == 0));
        assert_eq!(decode_ns_descriptors(&b), Ok(descs.to_vec()));

        // Wrong NIDL for a known type: error at the NIDL byte.
        let mut bad = b;
        bad[21] = 4;
        assert_eq!(decode_ns_descriptors(&bad).unwrap_err().offset(), 21);
        let mut bad = b;
        bad[1] = 0;
        assert_eq!(decode_ns_descriptors(&bad).unwrap_err().offset(), 1);
        // Unknown NIDT: error at the NIDT byte.
        let mut bad = b;
        bad[25] = 9;
        assert_eq!(decode_ns_descriptors(&bad).unwrap_err().offset(), 25);
        // A descriptor that runs past the 4 KiB.
        let mut bad = [0u8; IDENTIFY_LEN];
        encode_ns_descriptors(&vec![NsDescriptor::Uuid([1; 16]); 204], &mut bad);
        assert_eq!(decode_ns_descriptors(&bad).unwrap().len(), 204);
        bad[4080] = nidt::UUID;
        bad[4081] = 16;
        assert_eq!(decode_ns_descriptors(&bad).unwrap_err().offset(), 4080);
        // Entries that do not fit are not encoded; a full page needs no terminator.
        let full = vec![NsDescriptor::Uuid([1; 16]); 300];
        encode_ns_descriptors(&full, &mut b);
        assert_eq!(decode_ns_descriptors(&b).unwrap().len(), IDENTIFY_LEN / 20);
    }
}
