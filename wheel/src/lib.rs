//! A hierarchical timing wheel: claimed tasks wait here until their fire time.
//!
//! Six levels of 64 slots at 1 ms resolution cover 64⁶ ms (about 795 days) ahead; a later
//! deadline waits in the coarsest level and is placed again as time reaches its slot.
//! Level `L` holds entries whose deadline differs from the wheel's current time only in
//! bits `6L .. 6L+6` and below; a slot of level `L` spans 64^L ms. When time reaches
//! the start of a higher-level slot, that slot's entries are cascaded down to finer
//! levels, so each entry moves at most five times; inserting and expiring are O(1)
//! amortised, against O(log n) for a binary heap.

const LEVELS: usize = 6;
const SLOTS: usize = 64;
const SLOT_BITS: u32 = 6;

pub struct TimingWheel<T> {
    levels: Vec<Vec<Vec<(u64, T)>>>,
    /// Per level, a bit per non-empty slot, to skip empty stretches of time.
    occupied: [u64; LEVELS],
    /// Every entry with a deadline at or before `now` has been expired.
    now: u64,
    len: usize,
}

impl<T> TimingWheel<T> {
    /// A wheel whose current time is `now` (ms).
    pub fn new(now: u64) -> Self {
        Self {
            levels: (0..LEVELS).map(|_| (0..SLOTS).map(|_| Vec::new()).collect()).collect(),
            occupied: [0; LEVELS],
            now,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    /// Schedules `item` at `deadline` (ms). An item already due is handed back as `Err`,
    /// for the caller to fire at once.
    pub fn insert(&mut self, deadline: u64, item: T) -> Result<(), T> {
        if deadline <= self.now {
            return Err(item);
        }
        self.place(deadline, item);
        self.len += 1;
        Ok(())
    }

    fn place(&mut self, deadline: u64, item: T) {
        let level = level_for(self.now, deadline);
        let slot = ((deadline >> (level as u32 * SLOT_BITS)) as usize) & (SLOTS - 1);
        self.levels[level][slot].push((deadline, item));
        self.occupied[level] |= 1 << slot;
    }

    /// Advances the wheel to `to` (ms), appending every entry with a deadline at or before
    /// `to` to `expired`, in deadline order.
    pub fn advance(&mut self, to: u64, expired: &mut Vec<T>) {
        while self.now < to {
            if self.len == 0 {
                self.now = to;
                return;
            }
            let t = self.next_stop(to);
            self.now = t;
            // Cascade the higher-level slots that start at t, coarsest first.
            for level in (1..LEVELS).rev() {
                let span_bits = level as u32 * SLOT_BITS;
                if t & ((1u64 << span_bits) - 1) == 0 {
                    let slot = ((t >> span_bits) as usize) & (SLOTS - 1);
                    if self.occupied[level] & (1 << slot) != 0 {
                        self.occupied[level] &= !(1 << slot);
                        let entries = std::mem::take(&mut self.levels[level][slot]);
                        for (deadline, item) in entries {
                            if deadline <= t {
                                // Can only be deadline == t: lands in level 0 below.
                                self.levels[0][(deadline as usize) & (SLOTS - 1)].push((deadline, item));
                                self.occupied[0] |= 1 << ((deadline as usize) & (SLOTS - 1));
                            } else {
                                self.place(deadline, item);
                            }
                        }
                    }
                }
            }
            let slot = (t as usize) & (SLOTS - 1);
            if self.occupied[0] & (1 << slot) != 0 {
                self.occupied[0] &= !(1 << slot);
                let entries = std::mem::take(&mut self.levels[0][slot]);
                self.len -= entries.len();
                expired.extend(entries.into_iter().map(|(_, item)| item));
            }
        }
    }

    /// The earliest time (ms) at which [`advance`](Self::advance) can expire an entry or
    /// move one to a finer level; `None` when the wheel is empty. Never later than the
    /// earliest deadline, so a driver may sleep until then instead of ticking every
    /// millisecond: an occupied level-0 slot gives its exact deadline, a coarser level
    /// the start of its first occupied slot (a cascade point).
    pub fn next_wake(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        // Each level's occupied slots lie ahead of the current one within its span (an
        // entry is placed by the highest digit in which its deadline differs from `now`,
        // and cascaded when `now` reaches its slot), and a finer level's all come before
        // a coarser one's: the first occupied level decides.
        for level in 0..LEVELS {
            let bits = level as u32 * SLOT_BITS;
            let digit = ((self.now >> bits) as u32) & (SLOTS as u32 - 1);
            let ahead = if digit == SLOTS as u32 - 1 { 0 } else { self.occupied[level] & (!0u64 << (digit + 1)) };
            if ahead != 0 {
                let span = bits + SLOT_BITS;
                let block = self.now & !((1u64 << span) - 1);
                return Some(block + ((ahead.trailing_zeros() as u64) << bits));
            }
        }
        // Only entries of the coarsest level behind its current slot are left: their
        // deadlines differ from `now` above its span, so none comes before the next span.
        let span = 1u64 << (LEVELS as u32 * SLOT_BITS);
        Some((self.now | (span - 1)) + 1)
    }

    /// The next instant after `now`, and at most `to`, at which something can happen: an
    /// occupied level-0 slot, or the start of a higher-level slot (a cascade point).
    fn next_stop(&self, to: u64) -> u64 {
        let now = self.now;
        // Level 0 within the current 64 ms block.
        let block = now & !((SLOTS as u64) - 1);
        let offset = (now & (SLOTS as u64 - 1)) as u32;
        let ahead = if offset == 63 { 0 } else { self.occupied[0] & (!0u64 << (offset + 1)) };
        if ahead != 0 {
            return (block + ahead.trailing_zeros() as u64).min(to);
        }
        // Otherwise the next level-1 boundary: every entry in a finer level is placed
        // relative to the current block, so nothing in level 0 lies beyond it.
        (block + SLOTS as u64).min(to)
    }
}

/// The level for `deadline` seen from `now`: the highest 6-bit group in which they differ.
fn level_for(now: u64, deadline: u64) -> usize {
    let masked = (now ^ deadline) | (SLOTS as u64 - 1);
    let significant = 63 - masked.leading_zeros();
    ((significant / SLOT_BITS) as usize).min(LEVELS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[test]
    fn due_items_are_handed_back() {
        let mut w = TimingWheel::new(1_000);
        assert_eq!(w.insert(1_000, "now"), Err("now"));
        assert_eq!(w.insert(999, "past"), Err("past"));
        assert!(w.is_empty());
    }

    #[test]
    fn expires_each_item_at_its_deadline_not_before() {
        let start = 1_700_000_000_123;
        let mut w = TimingWheel::new(start);
        for d in [1u64, 2, 63, 64, 65, 4_095, 4_096, 4_097, 300_000, 86_400_000] {
            w.insert(start + d, d).unwrap();
        }
        let mut out = Vec::new();
        for d in [1u64, 2, 63, 64, 65, 4_095, 4_096, 4_097, 300_000, 86_400_000] {
            w.advance(start + d - 1, &mut out);
            assert!(out.is_empty(), "{d} fired early: {out:?}");
            w.advance(start + d, &mut out);
            assert_eq!(out, vec![d]);
            out.clear();
        }
        assert!(w.is_empty());
    }

    #[test]
    fn an_entry_across_the_coarsest_span_wakes_the_wheel_at_the_span_not_every_millisecond() {
        let span = 1u64 << 36;
        let start = 3 * span - 10;
        let mut w = TimingWheel::new(start);
        w.insert(3 * span + 20, "across").unwrap();
        assert_eq!(w.next_wake(), Some(3 * span));
        let mut out = Vec::new();
        while let Some(at) = w.next_wake() {
            assert!(at > w.now() && at <= 3 * span + 20, "{at}");
            w.advance(at, &mut out);
        }
        assert_eq!(out, vec!["across"]);
        assert_eq!(w.now(), 3 * span + 20);
    }

    #[test]
    fn the_next_wake_is_never_after_the_earliest_deadline() {
        let start = 1_700_000_000_123;
        let mut w = TimingWheel::new(start);
        assert_eq!(w.next_wake(), None);
        w.insert(start + 5, "a").unwrap();
        assert_eq!(w.next_wake(), Some(start + 5), "level 0: exact");
        let mut w = TimingWheel::new(start);
        w.insert(start + 20_000, "b").unwrap();
        let mut out = Vec::new();
        let mut wakes = 0;
        // Waking only when told, the entry expires exactly at its deadline, after a few
        // cascades rather than 20,000 ticks.
        while let Some(at) = w.next_wake() {
            assert!(at <= start + 20_000 && at > w.now(), "{at}");
            w.advance(at - 1, &mut out);
            assert!(out.is_empty());
            w.advance(at, &mut out);
            wakes += 1;
        }
        assert_eq!(out, vec!["b"]);
        assert!(wakes <= 4, "{wakes} wakes");
    }

    /// Against a binary heap, with random deadlines and random advance steps: the same
    /// items expire at the same times.
    #[test]
    fn agrees_with_a_heap() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let start = 5_000_000u64;
        let mut wheel = TimingWheel::new(start);
        let mut heap = BinaryHeap::new();
        let mut now = start;
        let mut id = 0u64;
        for _ in 0..2_000 {
            for _ in 0..(rand() % 20) {
                let range = [100, 10_000, 1_000_000, 100_000_000][(rand() % 4) as usize];
                let deadline = now + 1 + rand() % range;
                wheel.insert(deadline, (deadline, id)).unwrap();
                heap.push(Reverse((deadline, id)));
                id += 1;
            }
            if let Some(Reverse((earliest, _))) = heap.peek() {
                let wake = wheel.next_wake().expect("not empty");
                assert!(wake > now && wake <= *earliest, "wake {wake}, now {now}, earliest {earliest}");
            }
            now += rand() % [3, 200, 50_000][(rand() % 3) as usize];
            let mut got = Vec::new();
            wheel.advance(now, &mut got);
            let mut want = Vec::new();
            while heap.peek().is_some_and(|Reverse((d, _))| *d <= now) {
                want.push(heap.pop().unwrap().0);
            }
            got.sort();
            assert_eq!(got, want, "at {now}");
            assert_eq!(wheel.len(), heap.len());
        }
    }
}
