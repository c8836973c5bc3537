//! A worker's cell pool and the per-circuit cell queues built on it.
//!
//! Cells waiting inside the relay live in fixed-size slots of one
//! [`CellPool`] per worker, never in individual heap allocations: a slot is
//! taken from the free list when a cell is queued and returned when it is
//! written, so in steady state queueing allocates nothing. A [`CellQueue`] is
//! an intrusive FIFO of slot indices (head, tail, length), owned by the
//! circuit half whose connection will write the cells.
//!
//! The pool grows only when every slot is in use, by one chunk of
//! [`CHUNK`] slots (a separate allocation: nothing is copied, and memory
//! committed is what the queues' high-water mark needed, rounded up to a
//! chunk, not up to a doubling), up to a hard cap; beyond the cap
//! [`CellPool::alloc`] fails and the caller closes the circuit at fault
//! (see the worker's queue limits).
//!
//! It shrinks as C Tor's buffers give their empty chunks back: once a
//! second the worker calls [`CellPool::shrink`], which, after the pool
//! has not grown for [`QUIET_PASSES`] calls, frees the trailing chunks
//! (all but the first) that hold no cell. A burst's queues cost memory
//! while the burst lasts, not for the rest of the relay's life (issue 37).

use weft_proto::cell::BODY_LEN;

/// "No slot" in the intrusive links.
const NIL: u32 = u32::MAX;

/// log2 of [`CHUNK`].
const CHUNK_SHIFT: u32 = 10;
/// Slots per chunk: the pool's unit of growth (1,024 slots, 544 KiB).
pub const CHUNK: usize = 1 << CHUNK_SHIFT;

/// Calls of [`CellPool::shrink`] (one a second) without growth before
/// chunks go back: a load that needs them again soon keeps them.
pub const QUIET_PASSES: u32 = 10;

/// One queued cell.
#[derive(Clone)]
pub struct CellSlot {
    next: u32,
    /// Circuit ID, for connection-level (urgent) cells; circuit queues
    /// write with their half's ID.
    pub circ_id: u32,
    /// Cell command (RELAY or RELAY_EARLY; any command for urgent cells).
    pub command: u8,
    /// When the cell was read from its socket (ns on the relay's clock).
    pub stamp_ns: u64,
    /// When it entered its circuit queue on the writing worker.
    pub queued_ns: u64,
    /// The body, already relabelled / re-encrypted for the connection that
    /// will write it.
    pub body: [u8; BODY_LEN],
}

/// A per-worker pool of cell slots.
pub struct CellPool {
    /// Slot `i` is `chunks[i / CHUNK][i % CHUNK]`; every chunk but the
    /// last (cut by the cap) holds [`CHUNK`] slots.
    chunks: Vec<Box<[CellSlot]>>,
    /// Slots in all chunks.
    len: usize,
    free: Vec<u32>,
    cap: usize,
    /// [`CellPool::shrink`] calls since the pool last grew.
    quiet: u32,
}

impl std::fmt::Debug for CellPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellPool")
            .field("slots", &self.len)
            .field("free", &self.free.len())
            .field("cap", &self.cap)
            .finish()
    }
}

impl CellPool {
    /// A pool with `initial` slots that may grow to `cap` slots.
    pub fn new(initial: usize, cap: usize) -> Self {
        let mut p = CellPool {
            chunks: Vec::new(),
            len: 0,
            free: Vec::new(),
            cap: cap.max(1),
            quiet: 0,
        };
        p.grow(initial.clamp(1, p.cap));
        p
    }

    /// Add chunks until the pool holds at least `to` slots (at most the
    /// cap). New slots are written (resident) at once.
    fn grow(&mut self, to: usize) {
        let to = to.min(self.cap);
        self.quiet = 0;
        while self.len < to {
            let from = self.len;
            let n = CHUNK.min(self.cap - from);
            let chunk = vec![
                CellSlot {
                    next: NIL,
                    circ_id: 0,
                    command: 0,
                    stamp_ns: 0,
                    queued_ns: 0,
                    body: [0; BODY_LEN],
                };
                n
            ];
            self.chunks.push(chunk.into_boxed_slice());
            self.len += n;
            self.free.reserve(n);
            self.free.extend((from as u32..self.len as u32).rev());
        }
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.len - self.free.len()
    }

    /// Slots allocated (in use or free).
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Take a slot, growing the pool if it is exhausted and below its cap.
    pub fn alloc(&mut self) -> Option<u32> {
        if self.free.is_empty() {
            self.grow(self.len + 1);
        }
        let i = self.free.pop()?;
        self.slot_mut(i).next = NIL;
        Some(i)
    }

    /// The slot `i`.
    #[inline]
    pub fn slot(&self, i: u32) -> &CellSlot {
        &self.chunks[(i >> CHUNK_SHIFT) as usize][i as usize & (CHUNK - 1)]
    }

    /// The slot `i`, mutably.
    #[inline]
    pub fn slot_mut(&mut self, i: u32) -> &mut CellSlot {
        &mut self.chunks[(i >> CHUNK_SHIFT) as usize][i as usize & (CHUNK - 1)]
    }

    /// Write a cell into slot `i`: its command, when it was read and
    /// when it was queued (ns), its body.
    #[inline]
    pub fn put(
        &mut self,
        i: u32,
        command: u8,
        stamp_ns: u64,
        queued_ns: u64,
        body: &[u8; BODY_LEN],
    ) {
        let c = self.slot_mut(i);
        c.command = command;
        c.stamp_ns = stamp_ns;
        c.queued_ns = queued_ns;
        c.body = *body;
    }

    /// Return slot `i`.
    pub fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    /// The once-a-second pass: after [`QUIET_PASSES`] passes without
    /// growth, free the trailing chunks (never the first) whose slots are
    /// all free. Returns the slots freed. Costs one walk of the free list
    /// when the pool has a chunk to spare, nothing per cell.
    pub fn shrink(&mut self) -> usize {
        self.quiet = self.quiet.saturating_add(1);
        if self.quiet < QUIET_PASSES || self.chunks.len() < 2 || self.in_use() + CHUNK > self.len {
            return 0;
        }
        // Free the last chunk while all its slots are on the free list (it
        // holds no cell); one walk of the list per chunk looked at, no
        // allocation (the lists keep their capacity for the next growth).
        let before = self.len;
        while self.chunks.len() > 1 {
            let last = self.chunks.len() - 1;
            let n = self.chunks[last].len();
            let start = (last << CHUNK_SHIFT) as u32;
            if self.free.iter().filter(|&&i| i >= start).count() != n {
                break;
            }
            self.free.retain(|&i| i < start);
            self.chunks.pop();
            self.len -= n;
        }
        before - self.len
    }
}

/// A FIFO of pool slots (a circuit half's outbound cells).
#[derive(Debug, Clone, Copy)]
pub struct CellQueue {
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for CellQueue {
    fn default() -> Self {
        CellQueue {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl CellQueue {
    /// Cells queued.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append slot `i`.
    pub fn push(&mut self, pool: &mut CellPool, i: u32) {
        pool.slot_mut(i).next = NIL;
        if self.tail == NIL {
            self.head = i;
        } else {
            pool.slot_mut(self.tail).next = i;
        }
        self.tail = i;
        self.len += 1;
    }

    /// The oldest slot, if any (still in the queue).
    pub fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Remove and return the oldest slot.
    pub fn pop(&mut self, pool: &CellPool) -> Option<u32> {
        if self.head == NIL {
            return None;
        }
        let i = self.head;
        self.head = pool.slot(i).next;
        if self.head == NIL {
            self.tail = NIL;
        }
        self.len -= 1;
        Some(i)
    }

    /// Release every queued slot back to the pool.
    pub fn clear(&mut self, pool: &mut CellPool) {
        while let Some(i) = self.pop(pool) {
            pool.release(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_fifo_and_slots_recycle() {
        let mut pool = CellPool::new(4, 1000);
        let (mut a, mut b) = (CellQueue::default(), CellQueue::default());
        for n in 0..10u8 {
            let s = pool.alloc().unwrap();
            pool.slot_mut(s).body[0] = n;
            if n % 2 == 0 {
                a.push(&mut pool, s)
            } else {
                b.push(&mut pool, s)
            }
        }
        assert_eq!((a.len(), b.len(), pool.in_use()), (5, 5, 10));
        let mut got = Vec::new();
        while let Some(s) = a.pop(&pool) {
            got.push(pool.slot(s).body[0]);
            pool.release(s);
        }
        assert_eq!(got, vec![0, 2, 4, 6, 8]);
        let cap = pool.capacity();
        // Steady state: alloc/release cycles do not grow the pool.
        for _ in 0..10_000 {
            let s = pool.alloc().unwrap();
            a.push(&mut pool, s);
            let s = a.pop(&pool).unwrap();
            pool.release(s);
        }
        assert_eq!(pool.capacity(), cap);
        b.clear(&mut pool);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn the_cap_is_enforced() {
        let mut pool = CellPool::new(2, 100);
        let got: Vec<u32> = std::iter::from_fn(|| pool.alloc()).take(1000).collect();
        assert_eq!(got.len(), 100);
        assert!(pool.alloc().is_none());
    }

    #[test]
    fn a_pool_grows_by_one_chunk_and_keeps_its_slots_in_place() {
        let mut pool = CellPool::new(CHUNK, 4 * CHUNK + 10);
        assert_eq!(pool.capacity(), CHUNK);
        let first = pool.alloc().unwrap();
        pool.slot_mut(first).body[0] = 7;
        let mut n = vec![first];
        n.extend((1..=CHUNK).map(|_| pool.alloc().unwrap()));
        assert_eq!(pool.capacity(), 2 * CHUNK, "one chunk more, not doubled");
        // Slots already handed out did not move or change.
        assert_eq!(pool.slot(first).body[0], 7);
        n.extend(std::iter::from_fn(|| pool.alloc()));
        assert_eq!(n.len(), 4 * CHUNK + 10, "the last chunk is cut by the cap");
        let mut sorted = n.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), n.len(), "every slot handed out once");
        for &i in &n {
            pool.slot_mut(i).circ_id = i;
        }
        assert!(n.iter().all(|&i| pool.slot(i).circ_id == i));
    }

    #[test]
    fn a_quiet_pool_gives_back_its_empty_trailing_chunks() {
        let mut pool = CellPool::new(CHUNK, 8 * CHUNK);
        let mut held: Vec<u32> = (0..3 * CHUNK + 1).map(|_| pool.alloc().unwrap()).collect();
        assert_eq!(pool.capacity(), 4 * CHUNK);
        // A cell in the last chunk keeps it (and those before it).
        let last = *held.iter().max().unwrap();
        held.retain(|&i| i != last);
        for i in held.drain(..) {
            pool.release(i);
        }
        for _ in 0..2 * QUIET_PASSES {
            assert_eq!(pool.shrink(), 0, "a cell is still queued in the last chunk");
        }
        // Once it leaves, the pool shrinks to its first chunk.
        pool.release(last);
        assert_eq!(pool.shrink(), 3 * CHUNK);
        assert_eq!((pool.capacity(), pool.in_use()), (CHUNK, 0));
        // Slots handed out afterwards are the first chunk's, each once.
        let mut again: Vec<u32> = (0..CHUNK).map(|_| pool.alloc().unwrap()).collect();
        again.sort_unstable();
        again.dedup();
        assert_eq!(again.len(), CHUNK);
        assert!(again.iter().all(|&i| (i as usize) < CHUNK));
        assert_eq!(pool.capacity(), CHUNK);
    }

    #[test]
    fn a_pool_that_grew_recently_keeps_its_chunks() {
        let mut pool = CellPool::new(CHUNK, 8 * CHUNK);
        let held: Vec<u32> = (0..CHUNK + 1).map(|_| pool.alloc().unwrap()).collect();
        for i in held {
            pool.release(i);
        }
        for _ in 1..QUIET_PASSES {
            assert_eq!(pool.shrink(), 0, "not yet quiet");
        }
        // Growth restarts the count.
        let held: Vec<u32> = (0..2 * CHUNK + 1).map(|_| pool.alloc().unwrap()).collect();
        for i in held {
            pool.release(i);
        }
        for _ in 1..QUIET_PASSES {
            assert_eq!(pool.shrink(), 0);
        }
        assert_eq!(pool.shrink(), 2 * CHUNK);
        assert_eq!(pool.capacity(), CHUNK);
    }
}
