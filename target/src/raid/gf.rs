//! Parity over GF(2^8): RAID 5's P (XOR) and RAID 6's Q (Reed-Solomon syndrome with generator
//! 2 over the polynomial x^8 + x^4 + x^3 + x^2 + 1, 0x11d, as Linux md and SPDK compute it),
//! and the recovery of one or two lost strips.
//!
//! The hot kernels (P, Q, the delta of a read-modify-write) work on 64-bit words with a
//! byte-wise multiply by 2 in SWAR form (Linux's `raid6/int.uc` does the same in C): no table,
//! no unsafe, and loops the compiler vectorizes. Multiplying by another constant (recovery,
//! degraded only) goes through a 256-entry table per call.

use std::ops::Range;

/// x^8 + x^4 + x^3 + x^2 + 1, without the x^8 term.
const POLY: u8 = 0x1d;

/// g^i for i in 0..255 (g = 2), and log_g of 1..=255.
struct Tables {
    exp: [u8; 512],
    log: [u8; 256],
}

const TABLES: Tables = {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u8 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x;
        exp[i + 255] = x;
        log[x as usize] = i as u8;
        x = mul2_byte(x);
        i += 1;
    }
    Tables { exp, log }
};

const fn mul2_byte(x: u8) -> u8 {
    let hi = x & 0x80;
    let x = x << 1;
    if hi != 0 {
        x ^ POLY
    } else {
        x
    }
}

/// a * b in GF(2^8).
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    TABLES.exp[TABLES.log[a as usize] as usize + TABLES.log[b as usize] as usize]
}

/// 1 / a (a != 0).
pub fn inv(a: u8) -> u8 {
    debug_assert!(a != 0);
    TABLES.exp[255 - TABLES.log[a as usize] as usize]
}

/// g^i.
pub fn pow2(i: usize) -> u8 {
    TABLES.exp[i % 255]
}

/// Eight bytes, each multiplied by 2.
#[inline(always)]
fn mul2(v: u64) -> u64 {
    let hi = v & 0x8080_8080_8080_8080;
    let lo = (v << 1) & 0xfefe_fefe_fefe_fefe;
    // (hi >> 7) has 1 in each byte whose top bit was set; times 0x1d stays within the byte.
    lo ^ ((hi >> 7) * POLY as u64)
}

#[inline(always)]
fn word(b: &[u8]) -> u64 {
    u64::from_ne_bytes(b.try_into().unwrap())
}

/// Bytes processed per step of the word loops: four words, which the compiler keeps in
/// vector registers.
const STEP: usize = 32;

/// `dst ^= src`.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    let n = dst.len() - dst.len() % STEP;
    for (d, s) in dst[..n]
        .chunks_exact_mut(STEP)
        .zip(src[..n].chunks_exact(STEP))
    {
        for k in 0..STEP / 8 {
            let r = k * 8..k * 8 + 8;
            let x = word(&d[r.clone()]) ^ word(&s[r.clone()]);
            d[r].copy_from_slice(&x.to_ne_bytes());
        }
    }
    for (d, s) in dst[n..].iter_mut().zip(&src[n..]) {
        *d ^= s;
    }
}

/// `q = q * 2 ^ src`, byte by byte: one step of Horner's rule for Q.
fn mul2_xor_into(q: &mut [u8], src: Option<&[u8]>) {
    let n = q.len() - q.len() % STEP;
    match src {
        Some(src) => {
            assert_eq!(q.len(), src.len());
            for (d, s) in q[..n]
                .chunks_exact_mut(STEP)
                .zip(src[..n].chunks_exact(STEP))
            {
                for k in 0..STEP / 8 {
                    let r = k * 8..k * 8 + 8;
                    let x = mul2(word(&d[r.clone()])) ^ word(&s[r.clone()]);
                    d[r].copy_from_slice(&x.to_ne_bytes());
                }
            }
            for (d, s) in q[n..].iter_mut().zip(&src[n..]) {
                *d = mul2_byte(*d) ^ s;
            }
        }
        None => {
            for d in q[..n].chunks_exact_mut(STEP) {
                for k in 0..STEP / 8 {
                    let r = k * 8..k * 8 + 8;
                    let x = mul2(word(&d[r.clone()]));
                    d[r].copy_from_slice(&x.to_ne_bytes());
                }
            }
            for d in &mut q[n..] {
                *d = mul2_byte(*d);
            }
        }
    }
}

/// Parity is made a block at a time: the block of P (and Q) being made stays in L1 while each
/// strip's block streams through it once. Whole strips one after another (64 KiB each) ran P
/// at the speed of L2.
const BLOCK: usize = 4096;

/// The blocks of a strip of `len` bytes.
fn blocks(len: usize) -> impl Iterator<Item = Range<usize>> {
    (0..len)
        .step_by(BLOCK)
        .map(move |o| o..(o + BLOCK).min(len))
}

/// P's block `r`, into `pb`, which holds the first strip's block already.
fn p_rest(data: &[&[u8]], pb: &mut [u8], r: Range<usize>) {
    for d in data.iter().skip(1) {
        xor_into(pb, &d[r.clone()]);
    }
}

/// Q's block `r`, into `qb`, which holds the last strip's block (zeros for `None`) already:
/// Horner's rule from the highest index down, q = q*2 + d_i.
fn q_rest(data: &[Option<&[u8]>], qb: &mut [u8], r: Range<usize>) {
    for d in data.iter().rev().skip(1) {
        mul2_xor_into(qb, d.map(|d| &d[r.clone()]));
    }
}

/// P = XOR of `data`, into `p` (every strip `p.len()` bytes).
pub fn gen_p(data: &[&[u8]], p: &mut [u8]) {
    let Some(first) = data.first() else {
        return p.fill(0);
    };
    for r in blocks(p.len()) {
        p[r.clone()].copy_from_slice(&first[r.clone()]);
        p_rest(data, &mut p[r.clone()], r);
    }
}

/// Q = sum of g^i * data[i], into `q`. A `None` strip counts as zeros (a strip left out of a
/// partial sum).
pub fn gen_q(data: &[Option<&[u8]>], q: &mut [u8]) {
    for r in blocks(q.len()) {
        match data.last().copied().flatten() {
            Some(d) => q[r.clone()].copy_from_slice(&d[r.clone()]),
            None => q[r.clone()].fill(0),
        }
        q_rest(data, &mut q[r.clone()], r);
    }
}

/// P of `data`, and Q with `with_q`: new buffers of the strips' length, each filled block by
/// block from its first strip (never zeroed first).
pub fn parity(data: &[&[u8]], with_q: bool) -> (Vec<u8>, Option<Vec<u8>>) {
    let len = data.first().map_or(0, |d| d.len());
    let (Some(first), Some(last)) = (data.first(), data.last()) else {
        return (Vec::new(), with_q.then(Vec::new));
    };
    let mut p = Vec::with_capacity(len);
    // Q's strips as its Horner step takes them (a RAID 5 builds none).
    let mut q = with_q.then(|| {
        let some: Vec<Option<&[u8]>> = data.iter().map(|d| Some(*d)).collect();
        (Vec::with_capacity(len), some)
    });
    for r in blocks(len) {
        p.extend_from_slice(&first[r.clone()]);
        p_rest(data, &mut p[r.clone()], r.clone());
        if let Some((q, some)) = &mut q {
            q.extend_from_slice(&last[r.clone()]);
            q_rest(some, &mut q[r.clone()], r);
        }
    }
    let q = q.map(|(q, _)| q);
    (p, q)
}

/// `dst ^= c * src`, byte by byte through a table of c's products.
pub fn mul_xor_into(dst: &mut [u8], src: &[u8], c: u8) {
    assert_eq!(dst.len(), src.len());
    if c == 0 {
        return;
    }
    if c == 1 {
        return xor_into(dst, src);
    }
    let table: [u8; 256] = std::array::from_fn(|x| mul(x as u8, c));
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= table[*s as usize];
    }
}

/// `buf = c * buf`.
pub fn mul_in_place(buf: &mut [u8], c: u8) {
    let table: [u8; 256] = std::array::from_fn(|x| mul(x as u8, c));
    for b in buf {
        *b = table[*b as usize];
    }
}

/// One stripe's strips for recovery: the data strips and the parity, each present or lost.
/// Lost strips are given as buffers of the right length, filled by `recover`.
pub struct Stripe<'a> {
    pub data: Vec<&'a mut [u8]>,
    pub p: Option<&'a mut [u8]>,
    pub q: Option<&'a mut [u8]>,
}

/// Rebuilds the data strips listed in `lost` (indices into `stripe.data`, at most two, and at
/// most one without Q) from the rest; P and Q, when present, are taken as correct. With
/// `p_lost`/`q_lost` the parity buffer holds no valid content and is recomputed afterwards
/// from the (recovered) data.
pub fn recover(stripe: &mut Stripe, lost: &[usize], p_lost: bool, q_lost: bool) {
    let len = stripe.data.first().map_or(0, |d| d.len());
    let present_parity =
        usize::from(stripe.p.is_some() && !p_lost) + usize::from(stripe.q.is_some() && !q_lost);
    assert!(
        lost.len() <= present_parity,
        "{} data strips lost with {present_parity} parity strips",
        lost.len()
    );
    match lost {
        [] => {}
        [x] if stripe.p.is_some() && !p_lost => {
            let x = *x;
            let mut acc = stripe.p.as_deref().unwrap().to_vec();
            for (i, d) in stripe.data.iter().enumerate() {
                if i != x {
                    xor_into(&mut acc, d);
                }
            }
            stripe.data[x].copy_from_slice(&acc);
        }
        [x] => {
            // Only Q: Q ^ Q(with d_x = 0) = g^x * d_x.
            let x = *x;
            let mut acc = vec![0u8; len];
            let partial: Vec<Option<&[u8]>> = stripe
                .data
                .iter()
                .enumerate()
                .map(|(i, d)| (i != x).then_some(&d[..]))
                .collect();
            gen_q(&partial, &mut acc);
            xor_into(&mut acc, stripe.q.as_deref().unwrap());
            mul_in_place(&mut acc, inv(pow2(x)));
            stripe.data[x].copy_from_slice(&acc);
        }
        [x, y] => {
            let (x, y) = if x < y { (*x, *y) } else { (*y, *x) };
            // Pxy = d_x ^ d_y, Qxy = g^x d_x ^ g^y d_y; so d_x = (Qxy ^ g^y Pxy) / (g^x ^ g^y).
            let mut pxy = stripe.p.as_deref().unwrap().to_vec();
            let mut qxy = vec![0u8; len];
            let partial: Vec<Option<&[u8]>> = stripe
                .data
                .iter()
                .enumerate()
                .map(|(i, d)| (i != x && i != y).then_some(&d[..]))
                .collect();
            for d in partial.iter().flatten() {
                xor_into(&mut pxy, d);
            }
            gen_q(&partial, &mut qxy);
            xor_into(&mut qxy, stripe.q.as_deref().unwrap());
            let denom = inv(pow2(x) ^ pow2(y));
            // d_x = denom * Qxy ^ (denom * g^y) * Pxy
            let mut dx = vec![0u8; len];
            mul_xor_into(&mut dx, &qxy, denom);
            mul_xor_into(&mut dx, &pxy, mul(denom, pow2(y)));
            xor_into(&mut pxy, &dx);
            stripe.data[x].copy_from_slice(&dx);
            stripe.data[y].copy_from_slice(&pxy);
        }
        _ => unreachable!("checked above"),
    }
    let data: Vec<&[u8]> = stripe.data.iter().map(|d| &d[..]).collect();
    if p_lost {
        if let Some(p) = stripe.p.as_deref_mut() {
            gen_p(&data, p);
        }
    }
    if q_lost {
        if let Some(q) = stripe.q.as_deref_mut() {
            let some: Vec<Option<&[u8]>> = data.iter().map(|d| Some(*d)).collect();
            gen_q(&some, q);
        }
    }
}

/// The change a read-modify-write makes to P and Q: `delta[i]` is old ^ new of data strip i
/// (None: unchanged). P ^= sum of deltas, Q ^= sum of g^i * delta_i.
pub fn apply_delta(delta: &[Option<&[u8]>], p: Option<&mut [u8]>, q: Option<&mut [u8]>) {
    if let Some(p) = p {
        for d in delta.iter().flatten() {
            xor_into(p, d);
        }
    }
    if let Some(q) = q {
        let Some(top) = delta.iter().rposition(Option::is_some) else {
            return;
        };
        let mut acc = vec![0u8; q.len()];
        gen_q(&delta[..=top], &mut acc);
        xor_into(q, &acc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Straightforward reference: bit-by-bit carry-less multiply, reduced by 0x11d.
    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut r = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                r ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= POLY;
            }
            b >>= 1;
        }
        r
    }

    fn slow_pq(data: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
        let len = data[0].len();
        let mut p = vec![0u8; len];
        let mut q = vec![0u8; len];
        for (i, d) in data.iter().enumerate() {
            let mut g = 1u8;
            for _ in 0..i {
                g = slow_mul(g, 2);
            }
            for b in 0..len {
                p[b] ^= d[b];
                q[b] ^= slow_mul(g, d[b]);
            }
        }
        (p, q)
    }

    #[test]
    fn the_field_matches_the_reference() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1);
            }
            let w = u64::from_ne_bytes([a; 8]);
            assert_eq!(mul2(w), u64::from_ne_bytes([slow_mul(a, 2); 8]));
        }
        // 2 generates the whole multiplicative group.
        let all: std::collections::BTreeSet<u8> = (0..255).map(pow2).collect();
        assert_eq!(all.len(), 255);
    }

    fn strips() -> impl Strategy<Value = Vec<Vec<u8>>> {
        // Lengths that cover the word loop and its tail, and the blocks and a short last one.
        (
            1usize..=12,
            prop::sample::select(vec![1usize, 8, 31, 32, 33, 100, 4096, 4100, 9000]),
        )
            .prop_flat_map(|(k, len)| {
                prop::collection::vec(prop::collection::vec(any::<u8>(), len), k)
            })
    }

    proptest! {
        #[test]
        fn p_and_q_match_the_reference(data in strips()) {
            let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let len = data[0].len();
            let (rp, rq) = slow_pq(&data);
            // The write path's: new buffers, with and without Q; and each alone.
            prop_assert_eq!(parity(&refs, true), (rp.clone(), Some(rq.clone())));
            prop_assert_eq!(parity(&refs, false), (rp.clone(), None));
            let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
            // Over buffers that do not hold the answer already.
            p.fill(0xa5);
            gen_p(&refs, &mut p);
            prop_assert_eq!(&p, &rp);
            let some: Vec<Option<&[u8]>> = refs.iter().map(|d| Some(*d)).collect();
            q.fill(0xa5);
            gen_q(&some, &mut q);
            prop_assert_eq!(&q, &rq);
        }

        /// Every loss RAID 6 survives, and every one RAID 5 does: one or two data strips, a data
        /// strip with P or Q, P and Q.
        #[test]
        fn every_one_and_two_strip_loss_is_recovered(data in strips(), seed in any::<u64>()) {
            let k = data.len();
            let (p, q) = slow_pq(&data);
            // Strips 0..k are data, k is P, k+1 is Q.
            for a in 0..k + 2 {
                for b in a..k + 2 {
                    let lost: Vec<usize> = if a == b { vec![a] } else { vec![a, b] };
                    for raid5 in [false, true] {
                        if raid5 && (lost.contains(&(k + 1)) || lost.len() > 1) {
                            continue;
                        }
                        let mut d = data.clone();
                        let (mut pp, mut qq) = (p.clone(), q.clone());
                        // Garbage where the lost strips were.
                        let junk = (seed as u8) | 1;
                        for &l in &lost {
                            match l {
                                l if l < k => d[l].fill(junk),
                                l if l == k => pp.fill(junk),
                                _ => qq.fill(junk),
                            }
                        }
                        let data_lost: Vec<usize> = lost.iter().copied().filter(|&l| l < k).collect();
                        let mut stripe = Stripe {
                            data: d.iter_mut().map(|x| &mut x[..]).collect(),
                            p: Some(&mut pp[..]),
                            q: if raid5 { None } else { Some(&mut qq[..]) },
                        };
                        recover(&mut stripe, &data_lost, lost.contains(&k), lost.contains(&(k + 1)));
                        prop_assert_eq!(&d, &data, "lost {:?} raid5 {}", lost, raid5);
                        prop_assert_eq!(&pp, &p);
                        if !raid5 {
                            prop_assert_eq!(&qq, &q);
                        }
                    }
                }
            }
        }

        #[test]
        fn a_delta_updates_parity_as_a_full_recompute_would(data in strips(), new in prop::collection::vec(any::<u8>(), 9000), which in any::<prop::sample::Index>()) {
            let k = data.len();
            let len = data[0].len();
            let i = which.index(k);
            let (mut p, mut q) = slow_pq(&data);
            let mut changed = data.clone();
            changed[i].copy_from_slice(&new[..len]);
            let delta: Vec<u8> = data[i].iter().zip(&changed[i]).map(|(a, b)| a ^ b).collect();
            let deltas: Vec<Option<&[u8]>> = (0..k).map(|j| (j == i).then_some(&delta[..])).collect();
            apply_delta(&deltas, Some(&mut p), Some(&mut q));
            let (rp, rq) = slow_pq(&changed);
            prop_assert_eq!(p, rp);
            prop_assert_eq!(q, rq);
        }
    }
}
