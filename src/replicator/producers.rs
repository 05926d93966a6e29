//! Producer ids and sequences on the destination (spec §3 "Sequences", §4).
//!
//! Source producer ids are moved into the upper half of the positive range (`pid | 2^62`), which no
//! broker allocates, so that producers writing after failover never collide with mirrored state, and
//! so that an unmodified broker still tracks idempotence and transactions of mirrored data (a negative
//! id would mean "no producer").
//!
//! The replicator owns the sequence space of each mapped (producer id, epoch): it starts at 0 and adds
//! each batch's record count, because the source can have sequence gaps (compaction, DeleteRecords,
//! expired producer state) that an unmodified broker rejects.

use std::collections::HashMap;

/// The bit that moves a source producer id out of the destination's own range.
pub const PRODUCER_ID_MAPPING_BIT: i64 = 1 << 62;

/// The producer id of filler ABORT markers: in the mapped range, never the image of a real source id
/// in practice (sources allocate ids from 0 upward in blocks), and constant so its epoch and
/// coordinator epoch checks always pass (both stay 0).
pub const FILLER_PRODUCER_ID: i64 = i64::MAX;

/// Maps a source producer id into the destination (ids already in the upper half stay as they are;
/// -1, "no producer", stays -1).
pub fn map_producer_id(pid: i64) -> i64 {
    if pid < 0 { pid } else { pid | PRODUCER_ID_MAPPING_BIT }
}

/// A source producer's epoch went backwards: the broker would reject the batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("producer {producer_id} went from epoch {previous} back to epoch {epoch}")]
pub struct EpochRegression {
    /// Source producer id.
    pub producer_id: i64,
    /// Epoch seen before.
    pub previous: i16,
    /// Epoch of the batch now.
    pub epoch: i16,
}

/// Sequence numbers handed out per mapped (producer id, epoch) on one partition.
#[derive(Debug, Default, Clone)]
pub struct ProducerSequences {
    next: HashMap<(i64, i16), i32>,
    latest_epoch: HashMap<i64, i16>,
}

impl ProducerSequences {
    /// Nothing known: every producer starts at sequence 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Seeds from the destination's producer state (DescribeProducers): the next sequence of a
    /// mapped producer continues after `last_sequence` at `epoch`.
    pub fn seed(&mut self, mapped_pid: i64, epoch: i16, last_sequence: i32) {
        let next = if last_sequence < 0 { 0 } else { next_sequence(last_sequence, 1) };
        self.next.insert((mapped_pid, epoch), next);
        let e = self.latest_epoch.entry(mapped_pid).or_insert(epoch);
        *e = (*e).max(epoch);
    }

    /// The base sequence for a batch of `count` records of source producer `src_pid` at `epoch`;
    /// advances the counter. Returns the mapped producer id and the base sequence.
    ///
    /// # Errors
    /// [`EpochRegression`] if the epoch is older than one already written for this producer.
    pub fn assign(&mut self, src_pid: i64, epoch: i16, count: i32) -> Result<(i64, i32), EpochRegression> {
        let mapped = map_producer_id(src_pid);
        self.check_epoch(src_pid, epoch)?;
        self.latest_epoch.insert(mapped, epoch);
        let seq = self.next.entry((mapped, epoch)).or_insert(0);
        let base = *seq;
        *seq = next_sequence(base, count);
        Ok((mapped, base))
    }

    /// Notes a marker at `epoch` for `src_pid` (markers may bump the epoch, as transaction version 2
    /// does).
    ///
    /// # Errors
    /// [`EpochRegression`] if the epoch is older than one already written.
    pub fn marker(&mut self, src_pid: i64, epoch: i16) -> Result<i64, EpochRegression> {
        let mapped = map_producer_id(src_pid);
        self.check_epoch(src_pid, epoch)?;
        self.latest_epoch.insert(mapped, epoch);
        Ok(mapped)
    }

    fn check_epoch(&self, src_pid: i64, epoch: i16) -> Result<(), EpochRegression> {
        match self.latest_epoch.get(&map_producer_id(src_pid)) {
            Some(&previous) if epoch < previous => Err(EpochRegression { producer_id: src_pid, previous, epoch }),
            _ => Ok(()),
        }
    }
}

/// `base + count` in Kafka's sequence arithmetic (wraps from `i32::MAX` to 0).
fn next_sequence(base: i32, count: i32) -> i32 {
    let next = i64::from(base) + i64::from(count);
    (next % (i64::from(i32::MAX) + 1)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_into_upper_half() {
        assert_eq!(map_producer_id(0), 1 << 62);
        assert_eq!(map_producer_id(4711), (1 << 62) + 4711);
        assert_eq!(map_producer_id((1 << 62) + 5), (1 << 62) + 5);
        assert_eq!(map_producer_id(-1), -1);
    }

    #[test]
    fn renumbers_per_producer_and_epoch() {
        let mut s = ProducerSequences::new();
        assert_eq!(s.assign(7, 0, 5), Ok((map_producer_id(7), 0)));
        assert_eq!(s.assign(7, 0, 3), Ok((map_producer_id(7), 5)));
        assert_eq!(s.assign(8, 2, 1), Ok((map_producer_id(8), 0)));
        // A new epoch starts at 0.
        assert_eq!(s.assign(7, 1, 2), Ok((map_producer_id(7), 0)));
        assert_eq!(s.marker(7, 2), Ok(map_producer_id(7)));
        assert_eq!(s.assign(7, 0, 1), Err(EpochRegression { producer_id: 7, previous: 2, epoch: 0 }));
    }

    #[test]
    fn seeds_from_destination_state_and_wraps() {
        let mut s = ProducerSequences::new();
        s.seed(map_producer_id(3), 4, 99);
        assert_eq!(s.assign(3, 4, 1), Ok((map_producer_id(3), 100)));
        s.seed(map_producer_id(9), 0, i32::MAX - 1);
        assert_eq!(s.assign(9, 0, 3), Ok((map_producer_id(9), i32::MAX)));
        assert_eq!(s.assign(9, 0, 1), Ok((map_producer_id(9), 2)));
    }
}
