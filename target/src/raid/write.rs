//! A volume's writes: the write-intent mark first, then under the stripes' locks whole stripes
//! with parity made from the new data, parts of stripes by read-modify-write, or, where a
//! member of the stripe is lost, by rebuilding the stripe's rows and writing parity made from
//! all of them. A write that a member fails still succeeds while the volume has redundancy
//! left: the member is failed and the data lives on in the others.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::future::join_all;

use super::gf;
use super::layout::{Level, Piece};
use super::meta;
use super::volume::{lost_data, Rows, Volume};
use crate::backend::{check_range, Drive, DriveError};

impl Volume {
    /// Marks the regions of `stripes` dirty on the members (once per region), then returns
    /// them for `Intent::end`.
    pub(super) async fn begin_write(&self, stripes: &[u64]) -> Result<Vec<usize>, DriveError> {
        if !self.layout.level.redundant() {
            // Nothing to keep consistent.
            return Ok(Vec::new());
        }
        let mut regions: Vec<usize> = stripes.iter().map(|s| self.intent.region_of(*s)).collect();
        regions.dedup();
        if self.intent.begin(&regions) {
            return Ok(regions);
        }
        let persist = self.intent.persist.lock().await;
        if !self.intent.marked(&regions) {
            let bits = self.intent.snapshot();
            if let Err(e) = self.write_bitmap(&bits).await {
                drop(persist);
                self.intent.end(&regions);
                return Err(e);
            }
            self.intent.persisted(bits);
        }
        Ok(regions)
    }

    /// Writes the bitmap to every member left, durably.
    pub(super) async fn write_bitmap(&self, bits: &[u64]) -> Result<(), DriveError> {
        self.write_bitmap_tail(bits, self.log_tail()).await
    }

    /// `write_bitmap`, with the log's tail `tail`.
    pub(super) async fn write_bitmap_tail(
        &self,
        bits: &[u64],
        tail: u64,
    ) -> Result<(), DriveError> {
        let block = meta::encode_bitmap(self.intent.region_stripes, bits, tail);
        let writes = (0..self.members.len())
            .map(|i| self.member_write_any(i, meta::BITMAP_OFFSET, block.clone(), true));
        join_all(writes).await;
        self.check_alive(meta::BITMAP_OFFSET, meta::META_BLOCK as u64)
    }

    pub(super) async fn write_volume(
        &self,
        offset: u64,
        data: Bytes,
        fua: bool,
    ) -> Result<(), DriveError> {
        check_range(self.info(), offset, data.len() as u64)?;
        self.check_alive(offset, data.len() as u64)?;
        let pieces: Vec<Piece> = self.layout.pieces(offset, data.len() as u64).collect();
        let mut stripes: Vec<u64> = pieces.iter().map(|p| p.stripe).collect();
        stripes.dedup();
        let regions = self.begin_write(&stripes).await?;
        let res = async {
            let _locks = match self.layout.level {
                Level::Raid0 => Vec::new(),
                _ => self.lock_stripes(&stripes).await,
            };
            let each = stripes.iter().map(|&s| {
                let mine: Vec<Piece> = pieces.iter().copied().filter(|p| p.stripe == s).collect();
                self.write_stripe(s, mine, &data, fua)
            });
            join_all(each).await.into_iter().collect::<Result<(), _>>()
        }
        .await;
        self.intent.end(&regions);
        res?;
        self.changes_on_record().await;
        Ok(())
    }

    pub(super) async fn write_stripe(
        &self,
        stripe: u64,
        pieces: Vec<Piece>,
        data: &Bytes,
        fua: bool,
    ) -> Result<(), DriveError> {
        if self.layout.level.parity() == 0 {
            let writes = pieces.iter().flat_map(|p| {
                let offset = self.layout.member_offset(p.stripe, p.within);
                let bytes = data.slice(p.buf_off..p.buf_off + p.len as usize);
                self.layout
                    .copies(p.stripe, p.strip)
                    .map(move |m| (m, offset, bytes.clone()))
            });
            let done =
                join_all(writes.map(|(m, o, b)| self.member_write(m, stripe, o, b, fua))).await;
            let offset = self.layout.member_offset(stripe, 0);
            if self.is_failed() || !done.iter().any(|&d| d) {
                return Err(lost_data(offset, self.layout.strip));
            }
            return Ok(());
        }
        let full = pieces.len() == self.layout.data_strips()
            && pieces
                .iter()
                .all(|p| p.within == 0 && p.len == self.layout.strip);
        if full && self.unsure_data(stripe).is_empty() {
            self.stats.full_stripes.fetch_add(1, Ordering::Relaxed);
            return self.write_full_stripe(stripe, &pieces, data, fua).await;
        }
        self.stats.rmw_stripes.fetch_add(1, Ordering::Relaxed);
        self.write_part_stripe(stripe, &pieces, data, fua).await
    }

    pub(super) async fn write_full_stripe(
        &self,
        stripe: u64,
        pieces: &[Piece],
        data: &Bytes,
        fua: bool,
    ) -> Result<(), DriveError> {
        let l = &self.layout;
        let strips: Vec<Bytes> = pieces
            .iter()
            .map(|p| data.slice(p.buf_off..p.buf_off + p.len as usize))
            .collect();
        let refs: Vec<&[u8]> = strips.iter().map(|s| &s[..]).collect();
        let parity = self.parity_of(stripe, &refs);
        let offset = l.member_offset(stripe, 0);
        let mut writes: Vec<(usize, Bytes)> = strips
            .into_iter()
            .enumerate()
            .map(|(i, b)| (l.member_of(stripe, i), b))
            .collect();
        writes.extend(parity);
        self.write_members(stripe, offset, writes, fua).await
    }

    /// Writes each `(member, data)` at `offset`; fails only when the volume no longer holds the
    /// data (a member that fails is failed, and the others carry the stripe).
    pub(super) async fn write_members(
        &self,
        stripe: u64,
        offset: u64,
        writes: Vec<(usize, Bytes)>,
        fua: bool,
    ) -> Result<(), DriveError> {
        let len = writes.first().map_or(0, |w| w.1.len() as u64);
        join_all(
            writes
                .into_iter()
                .map(|(m, b)| self.member_write(m, stripe, offset, b, fua)),
        )
        .await;
        self.check_alive(offset, len)
    }

    pub(super) async fn write_part_stripe(
        &self,
        stripe: u64,
        pieces: &[Piece],
        data: &Bytes,
        fua: bool,
    ) -> Result<(), DriveError> {
        let l = &self.layout;
        let k = l.data_strips();
        let (pm, qm) = l.parity_members(stripe);
        // Rows the write touches in any strip.
        let r0 = pieces.iter().map(|p| p.within).min().unwrap_or(0);
        let r1 = pieces.iter().map(|p| p.within + p.len).max().unwrap_or(0);
        let rows = (r1 - r0) as usize;
        let new_of = |p: &Piece| data.slice(p.buf_off..p.buf_off + p.len as usize);
        let lost = (0..k)
            .map(|i| l.member_of(stripe, i))
            .chain(pm)
            .chain(qm)
            .any(|m| !self.members[m].holds(stripe))
            || !self.unsure_data(stripe).is_empty();
        let parity = match lost {
            true => None,
            false => self.rmw_parity(stripe, pieces, &new_of, r0, rows).await,
        };
        // A member lost, or lost while the old data was read: rebuild the rows instead.
        let Some(parity) = parity else {
            return self
                .write_rebuilt_rows(stripe, pieces, data, fua, r0, r1)
                .await;
        };
        let data = pieces.iter().map(|p| (p.strip, p.within, new_of(p)));
        self.write_rows(stripe, data, parity, r0, rows, fua).await
    }

    /// Writes `data` (data strip, first row, bytes) and `parity` (member, rows `r0..r0 + rows`)
    /// at once; fails only when the volume no longer holds those rows.
    async fn write_rows(
        &self,
        stripe: u64,
        data: impl Iterator<Item = (usize, u64, Bytes)>,
        parity: Vec<(usize, Bytes)>,
        r0: u64,
        rows: usize,
        fua: bool,
    ) -> Result<(), DriveError> {
        let l = &self.layout;
        let offset = l.member_offset(stripe, r0);
        let data_writes = data.map(|(j, row, b)| {
            self.member_write(
                l.member_of(stripe, j),
                stripe,
                l.member_offset(stripe, row),
                b,
                fua,
            )
        });
        let parity_writes = parity
            .into_iter()
            .map(|(m, b)| self.member_write(m, stripe, offset, b, fua));
        futures_util::join!(join_all(data_writes), join_all(parity_writes));
        self.check_alive(offset, rows as u64)
    }

    /// Read-modify-write: the parity of rows `r0..r0 + rows` after `pieces` are written, from
    /// their old data and the old parity. None when a member fails meanwhile.
    async fn rmw_parity(
        &self,
        stripe: u64,
        pieces: &[Piece],
        new_of: &impl Fn(&Piece) -> Bytes,
        r0: u64,
        rows: usize,
    ) -> Option<Vec<(usize, Bytes)>> {
        let l = &self.layout;
        let (pm, qm) = l.parity_members(stripe);
        let offset = l.member_offset(stripe, r0);
        let olds = pieces.iter().map(|p| {
            let (m, at) = (
                l.member_of(stripe, p.strip),
                l.member_offset(stripe, p.within),
            );
            self.member_read(m, stripe, at, p.len as usize)
        });
        let parity_reads = pm
            .into_iter()
            .chain(qm)
            .map(|m| self.member_read(m, stripe, offset, rows));
        let (olds, parity) = futures_util::join!(join_all(olds), join_all(parity_reads));
        let mut deltas: Vec<Option<Vec<u8>>> = vec![None; l.data_strips()];
        for (p, old) in pieces.iter().zip(olds) {
            let delta = deltas[p.strip].get_or_insert_with(|| vec![0u8; rows]);
            let at = (p.within - r0) as usize;
            let d = &mut delta[at..at + p.len as usize];
            d.copy_from_slice(&old?);
            gf::xor_into(d, &new_of(p));
        }
        let mut parity: Vec<(usize, Vec<u8>)> = pm
            .into_iter()
            .chain(qm)
            .zip(parity)
            .map(|(m, b)| Some((m, b?.to_vec())))
            .collect::<Option<_>>()?;
        let refs: Vec<Option<&[u8]>> = deltas.iter().map(|d| d.as_deref()).collect();
        let (p, q) = match &mut parity[..] {
            [(_, p), (_, q)] => (Some(&mut p[..]), Some(&mut q[..])),
            [(_, p)] => (Some(&mut p[..]), None),
            _ => (None, None),
        };
        gf::apply_delta(&refs, p, q);
        Some(
            parity
                .into_iter()
                .map(|(m, b)| (m, Bytes::from(b)))
                .collect(),
        )
    }

    /// Writes rows `r0..r1` of a stripe with a lost member, a window at a time: the window's
    /// rows rebuilt, the new data laid over them, parity made from all of it; where a data member
    /// is lost (or being rebuilt), the lost rows go to the log first (`write_record`), so that a
    /// crash before the parity is written leaves what they held recoverable.
    async fn write_rebuilt_rows(
        &self,
        stripe: u64,
        pieces: &[Piece],
        data: &Bytes,
        fua: bool,
        r0: u64,
        r1: u64,
    ) -> Result<(), DriveError> {
        let l = &self.layout;
        let mut w0 = r0;
        while w0 < r1 {
            let w1 = (w0 + meta::LOG_WINDOW).min(r1);
            let rows = (w1 - w0) as usize;
            // Rows the write covers in every data strip need no reading (a whole stripe written
            // while degraded): they are laid over in full below.
            let covered = (0..l.data_strips()).all(|j| {
                pieces
                    .iter()
                    .any(|p| p.strip == j && p.within <= w0 && p.within + p.len >= w1)
            });
            let mut full = match covered {
                true => Rows {
                    data: vec![vec![0u8; rows]; l.data_strips()],
                },
                false => self.gather(stripe, w0, rows).await?,
            };
            let mut touched = Vec::new();
            for p in pieces {
                let (a, b) = (p.within.max(w0), (p.within + p.len).min(w1));
                if a >= b {
                    continue;
                }
                let from = p.buf_off + (a - p.within) as usize;
                let bytes = data.slice(from..from + (b - a) as usize);
                full.data[p.strip][(a - w0) as usize..(b - w0) as usize].copy_from_slice(&bytes);
                touched.push((p.strip, a, bytes));
            }
            let unsure = self.unsure_data(stripe);
            let slot = match unsure.is_empty() {
                true => None,
                false => {
                    let lost = unsure
                        .iter()
                        .map(|&j| &full.data[j][..])
                        .collect::<Vec<_>>()
                        .concat();
                    let record = meta::Record {
                        generation: 0,
                        seq: 0,
                        stripe,
                        r0: w0,
                        rows: rows as u64,
                        lost: unsure,
                        data: lost,
                    };
                    Some(self.write_record(record).await?)
                }
            };
            let refs: Vec<&[u8]> = full.data.iter().map(|d| &d[..]).collect();
            let parity = self.parity_of(stripe, &refs);
            let written = self
                .write_rows(stripe, touched.into_iter(), parity, w0, rows, fua)
                .await;
            if let Some(slot) = slot {
                self.record_done(slot);
            }
            written?;
            w0 = w1;
        }
        Ok(())
    }

    /// Zeroes a range: parts of stripes through the write path, whole stripes on every member
    /// at once (zeros are their own parity). Not while a member is not active on a parity
    /// volume: what it held lives only in parity, and zeroing straight on the others writes no
    /// log record, so a crash halfway would rebuild it from torn parity. Then every stripe goes
    /// through the write path, which logs its lost rows.
    pub(super) async fn zero_volume(&self, offset: u64, len: u64) -> Result<(), DriveError> {
        check_range(self.info(), offset, len)?;
        self.check_alive(offset, len)?;
        if self.layout.level.parity() > 0 && self.is_degraded() {
            return self.write_zeros_through(offset, len).await;
        }
        let sb = self.layout.stripe_bytes();
        let first_full = offset.next_multiple_of(sb);
        let end = offset + len;
        let last_full = end - end % sb;
        if first_full >= last_full {
            return self.write_zeros_through(offset, len).await;
        }
        if offset < first_full {
            self.write_zeros_through(offset, first_full - offset)
                .await?;
        }
        let stripes: Vec<u64> = (first_full / sb..last_full / sb).collect();
        let regions = self.begin_write(&stripes).await?;
        let res = async {
            let _locks = self.lock_stripes(&stripes).await;
            let at = self.layout.member_offset(first_full / sb, 0);
            let bytes = stripes.len() as u64 * self.layout.strip;
            let zeroes = self.members.iter().enumerate().map(|(i, m)| async move {
                if m.is_failed() {
                    return;
                }
                if let Err(e) = m.drive().write_zeroes(at, bytes).await {
                    self.fail(i, &format!("write zeroes failed: {e}"));
                }
            });
            join_all(zeroes).await;
            self.check_alive(at, bytes)
        }
        .await;
        self.intent.end(&regions);
        res?;
        self.changes_on_record().await;
        if last_full < end {
            self.write_zeros_through(last_full, end - last_full).await?;
        }
        Ok(())
    }

    pub(super) async fn write_zeros_through(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<(), DriveError> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(crate::backend::ZEROS_LEN as u64);
            self.write_volume(
                offset + done,
                crate::backend::zeroed_bytes(n as usize),
                false,
            )
            .await?;
            done += n;
        }
        Ok(())
    }
}
