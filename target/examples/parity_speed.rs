//! Parity throughput on one core: RAID 5's P and RAID 6's P+Q over k data strips of 64 KiB, as
//! the write path makes them (`gf::parity`: new buffers),
//! in GB/s of data protected (the figure issue 20 sets goals for: ≥ 5 GB/s for RAID 5,
//! ≥ 2.5 GB/s for RAID 6), and recovery of two lost strips (degraded reads of RAID 6).
//!
//! `cargo run --release -p fabrik-target --example parity_speed [SECONDS_PER_FIGURE]`

use std::time::{Duration, Instant};

use fabrik_target::raid::gf;

const STRIP: usize = 64 << 10;

fn rate(per_round: usize, mut round: impl FnMut(), secs: f64) -> f64 {
    // Warm the caches, then count rounds for the time given.
    round();
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        round();
        rounds += 1;
    }
    (rounds as f64 * per_round as f64) / start.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    println!(
        "| data strips | P (RAID 5) GB/s | P+Q (RAID 6) GB/s | 2 lost rebuilt (RAID 6) GB/s |"
    );
    println!("|---|---|---|---|");
    for k in [4usize, 8, 16, 30] {
        let data: Vec<Vec<u8>> = (0..k)
            .map(|i| (0..STRIP).map(|b| (b * 31 + i * 7) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let bytes = k * STRIP;
        let p_rate = rate(bytes, || drop(gf::parity(&refs, false)), secs);
        let pq_rate = rate(bytes, || drop(gf::parity(&refs, true)), secs);
        let (p, q) = gf::parity(&refs, true);
        let q = q.unwrap();
        let mut work = data.clone();
        let (mut pp, mut qq) = (p.clone(), q.clone());
        let rec_rate = rate(
            bytes,
            || {
                let mut s = gf::Stripe {
                    data: work.iter_mut().map(|d| &mut d[..]).collect(),
                    p: Some(&mut pp[..]),
                    q: Some(&mut qq[..]),
                };
                gf::recover(&mut s, &[0, k / 2], false, false);
            },
            secs,
        );
        assert!(work == data, "recovered data differs");
        println!("| {k} | {p_rate:.1} | {pq_rate:.1} | {rec_rate:.2} |");
    }
}
