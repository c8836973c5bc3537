//! The cross-worker cell channel: a bounded single-producer single-consumer
//! queue of fixed-size messages, one per ordered pair of workers.
//!
//! It is built for batches: the producer writes any number of messages and
//! makes them visible with one release store ([`Producer::publish`]); the
//! consumer reads everything visible and frees the space with one store
//! ([`Consumer::release`]). Nothing locks. Waking the consumer's event
//! loop is the caller's business, once per published batch, through a
//! [`Notifier`] (see the worker).
//!
//! Its room is made of blocks of [`BLOCK`] messages, allocated as the
//! queue first needs them, up to its capacity, and handed back by the
//! consumer once read; the producer takes the block given back last
//! first. So a queue that a busy consumer keeps nearly empty cycles
//! through the same one or two blocks, warm in cache, while one whose
//! consumer fell behind (descheduled for a while, on a machine shared
//! with other work) can hold thousands of messages: the memory follows
//! what is in flight, not the capacity, and [`Producer::shrink`] gives
//! back blocks a burst needed. (A fixed array of the capacity, written
//! all the way round, cost more per cell with every cell crossing once it
//! was larger than 512 messages; docs/perf.md.)
//!
//! This is the only `unsafe` data structure in weft-relay. The invariants:
//! * Messages are numbered from 0; message `i` lives in slot `i % B` of
//!   the `i / B`-th block of the chain. `tail` (published) is advanced by
//!   the producer with Release after writing, read by the consumer with
//!   Acquire before reading; `head` (released) likewise the other way.
//!   Messages in `[head, tail)` belong to the consumer, which only reads
//!   them; the producer writes only past `tail`.
//! * The producer links the next block (`next`, Release) before it
//!   writes the block's first message, so a consumer that may read that
//!   message (Acquire on `tail`) sees the link.
//! * A block belongs to the consumer from the first message it may read
//!   in it until it moves into the next block; it then hands the block
//!   back on the return ring (itself a [`Ring`] of block addresses), and
//!   it belongs to the producer again, which may reuse it at once.
//! * Every block ever allocated is on `blocks`, which only the producer
//!   touches while both ends live; the last end to go frees them all.
//!
//! Messages are `Copy`, so no destructor ever runs on a slot.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Messages per block (34 KiB of 536-byte ring messages).
pub const BLOCK: usize = 64;

/// Keeps the two indices on separate cache lines (no false sharing between
/// the producer's and the consumer's cores).
#[repr(align(64))]
struct Padded(AtomicUsize);

/// A block of the queue's room.
struct Block<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// The block after it in the chain (null until linked).
    next: AtomicPtr<Block<T>>,
}

impl<T> Block<T> {
    fn alloc(size: usize) -> *mut Block<T> {
        let slots = (0..size)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        Box::into_raw(Box::new(Block {
            slots,
            next: AtomicPtr::new(ptr::null_mut()),
        }))
    }
}

/// What both ends share.
struct Ring<T> {
    /// Messages per block (a power of two).
    block: usize,
    head: Padded,
    tail: Padded,
    /// The producer found the queue full and wants to hear when it drains.
    producer_waiting: AtomicBool,
    /// Every block allocated (producer's while both ends live).
    blocks: UnsafeCell<Vec<*mut Block<T>>>,
}

// SAFETY: the queue hands each slot and each block to exactly one side at
// a time (see the module invariants); T: Send is required to move
// messages across threads. `blocks` is touched by the producer only, and
// by `drop` when neither end is left.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        for &b in self.blocks.get_mut().iter() {
            // SAFETY: both ends are gone (this is the last `Arc`); every
            // block was made by `Block::alloc` and is freed once (a block
            // the producer freed earlier left the list then).
            drop(unsafe { Box::from_raw(b) });
        }
    }
}

/// The writing end.
pub struct Producer<T> {
    ring: Arc<Ring<T>>,
    /// Next message to write (not yet published beyond `published`).
    tail: usize,
    published: usize,
    /// Last seen consumer head (refreshed only when the queue looks full).
    head_cache: usize,
    /// The block message `tail - 1` went to (the first block at the start).
    block: *mut Block<T>,
    /// Most messages unread at once.
    capacity: usize,
    /// Most blocks at once.
    max_blocks: usize,
    /// Blocks handed back by the consumer, from the return ring; the last
    /// one handed back is reused first (warm).
    free: Vec<*mut Block<T>>,
    /// The return ring's reading end (None: a fixed ring, one block that
    /// follows itself).
    returned: Option<Box<Consumer<usize>>>,
}

/// The reading end.
pub struct Consumer<T> {
    ring: Arc<Ring<T>>,
    head: usize,
    released: usize,
    tail_cache: usize,
    /// The block of message `head` (or of `head - 1` at a block's end).
    block: *mut Block<T>,
    /// Where read blocks go back to the producer (None: a fixed ring,
    /// whose one block never goes back).
    giveback: Option<Box<Producer<usize>>>,
}

// SAFETY: an end holds raw pointers to blocks that belong to it (see the
// module invariants); it moves to another thread whole.
unsafe impl<T: Send> Send for Producer<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Consumer<T> {}

/// A queue of at most `capacity` unread messages (at least 2; rounded up
/// to a power of two), in blocks of [`BLOCK`] (one block of the capacity
/// if that is smaller).
pub fn ring<T: Copy + Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let cap = capacity.max(2).next_power_of_two();
    let block = cap.min(BLOCK);
    // The blocks a full queue spans, one the consumer has not given back
    // yet, and one for the producer to link: its most at once.
    let max_blocks = cap / block + 2;
    let (giveback, returned) = fixed_ring::<usize>(max_blocks);
    let (mut p, mut c) = ring_parts::<T>(cap, block, max_blocks);
    p.returned = Some(Box::new(returned));
    c.giveback = Some(Box::new(giveback));
    (p, c)
}

/// A queue of one block that is its own successor (written round and
/// round, its room all allocated at once): the return ring of a [`ring`].
fn fixed_ring<T: Copy + Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let cap = capacity.max(2).next_power_of_two();
    let (p, c) = ring_parts::<T>(cap, cap, 1);
    // SAFETY: nobody else holds the block yet.
    unsafe { (*p.block).next.store(p.block, Ordering::Relaxed) };
    (p, c)
}

/// The two ends over one first block of `block` messages; at most
/// `capacity` messages unread and `max_blocks` blocks.
fn ring_parts<T: Copy + Send>(
    capacity: usize,
    block: usize,
    max_blocks: usize,
) -> (Producer<T>, Consumer<T>) {
    let first = Block::<T>::alloc(block);
    let mut blocks = Vec::with_capacity(max_blocks);
    blocks.push(first);
    let r = Arc::new(Ring {
        block,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
        producer_waiting: AtomicBool::new(false),
        blocks: UnsafeCell::new(blocks),
    });
    (
        Producer {
            ring: r.clone(),
            tail: 0,
            published: 0,
            head_cache: 0,
            block: first,
            capacity,
            max_blocks,
            free: Vec::with_capacity(max_blocks),
            returned: None,
        },
        Consumer {
            ring: r,
            head: 0,
            released: 0,
            tail_cache: 0,
            block: first,
            giveback: None,
        },
    )
}

impl<T: Copy + Send> Producer<T> {
    /// Capacity of the queue.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// True if the queue has room for `want` more messages now (no
    /// registration for a wake-up).
    pub fn has_room(&mut self, want: usize) -> bool {
        self.head_cache = self.ring.head.0.load(Ordering::Acquire);
        self.capacity - (self.tail - self.head_cache) >= want
    }

    /// True if the queue has room for `want` more messages now; if not,
    /// the producer is registered to be told (by [`Consumer::release`]
    /// returning true) when the consumer frees some, as a failed push
    /// registers it.
    pub fn has_room_or_ask_wake(&mut self, want: usize) -> bool {
        let room = |p: &Self| p.capacity - (p.tail - p.head_cache) >= want;
        if self.has_room(want) {
            return true;
        }
        self.ring.producer_waiting.store(true, Ordering::SeqCst);
        // Re-check: the consumer may have released in between.
        self.head_cache = self.ring.head.0.load(Ordering::SeqCst);
        room(self)
    }

    /// Write `msg` (not yet visible); `Err(msg)` if the queue is full. On
    /// full, the producer is registered to be told (by
    /// [`Consumer::release`] returning true) when space frees up.
    #[inline]
    pub fn push(&mut self, msg: T) -> Result<(), T> {
        self.push_with(|| msg).map_err(|make| make())
    }

    /// Like [`Self::push`], but the message is made by `make` straight
    /// into its slot (a cell's body is copied once, from where it was read
    /// into the queue); `Err(make)` if the queue is full.
    #[inline]
    pub fn push_with<F: FnOnce() -> T>(&mut self, make: F) -> Result<(), F> {
        self.push_filled(make, |_| {})
    }

    /// Like [`Self::push_with`], then `fill` finishes the message where it
    /// lies, before it is published: `make` can leave a large field cheap
    /// (zeroed) and `fill` copy it in from memory (`make` alone would
    /// copy such a field twice, through the stack, whenever it reads it
    /// from memory rather than from a reference it was handed).
    #[inline]
    pub fn push_filled<F: FnOnce() -> T>(
        &mut self,
        make: F,
        fill: impl FnOnce(&mut T),
    ) -> Result<(), F> {
        if self.tail - self.head_cache >= self.capacity {
            self.head_cache = self.ring.head.0.load(Ordering::Acquire);
            if self.tail - self.head_cache >= self.capacity {
                self.ring.producer_waiting.store(true, Ordering::SeqCst);
                // Re-check: the consumer may have drained in between.
                self.head_cache = self.ring.head.0.load(Ordering::SeqCst);
                if self.tail - self.head_cache >= self.capacity {
                    return Err(make);
                }
                self.ring.producer_waiting.store(false, Ordering::Relaxed);
            }
        }
        let idx = self.tail & (self.ring.block - 1);
        if idx == 0 && self.tail != 0 {
            // The block is full: link the next one before writing into it.
            let Some(next) = self.next_block() else {
                return Err(make);
            };
            // SAFETY: `self.block` is the producer's current block, live
            // (the consumer gives a block back only after moving past it,
            // and it cannot move past a block whose `next` is null).
            unsafe { (*self.block).next.store(next, Ordering::Release) };
            self.block = next;
        }
        // SAFETY: `self.block` holds message `tail`, which is past `tail`
        // as published: the consumer does not read it until we publish, so
        // the producer alone may write it (here, and in `fill`).
        unsafe {
            let slot = &(&(*self.block).slots)[idx];
            fill((*slot.get()).write(make()));
        }
        self.tail += 1;
        Ok(())
    }

    /// A block to link after the current one: the one given back last, or
    /// a new one while the queue has fewer than it may need. None only if
    /// every block is out (cannot happen while the count is below the
    /// capacity; kept as a full queue rather than trusted).
    fn next_block(&mut self) -> Option<*mut Block<T>> {
        if self.returned.is_none() {
            // A fixed ring: its one block follows itself (linked at birth).
            return Some(self.block);
        }
        self.take_returned();
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                // SAFETY: the producer's own list (module invariants).
                let blocks = unsafe { &mut *self.ring.blocks.get() };
                if blocks.len() >= self.max_blocks {
                    return None;
                }
                let b = Block::alloc(self.ring.block);
                blocks.push(b);
                b
            }
        };
        // SAFETY: a free block is the producer's; nobody reads its link.
        unsafe { (*b).next.store(ptr::null_mut(), Ordering::Relaxed) };
        Some(b)
    }

    /// Move the blocks the consumer gave back onto the free list (the
    /// last given back ends up on top).
    fn take_returned(&mut self) {
        let Some(r) = self.returned.as_mut() else {
            return;
        };
        while let Some(b) = r.pop() {
            self.free.push(b as *mut Block<T>);
        }
        r.release();
    }

    /// Make every pushed message visible; true if there was anything new.
    pub fn publish(&mut self) -> bool {
        if self.tail == self.published {
            return false;
        }
        self.ring.tail.0.store(self.tail, Ordering::SeqCst);
        self.published = self.tail;
        true
    }

    /// Messages pushed but not yet published.
    pub fn unpublished(&self) -> usize {
        self.tail - self.published
    }

    /// Give back the free blocks beyond `keep` (a burst's room), to the
    /// allocator. Returns how many went. No allocation.
    pub fn shrink(&mut self, keep: usize) -> usize {
        self.take_returned();
        let mut gone = 0;
        while self.free.len() > keep {
            let Some(b) = self.free.pop() else { break };
            // SAFETY: the producer's own list (module invariants).
            let blocks = unsafe { &mut *self.ring.blocks.get() };
            if let Some(i) = blocks.iter().position(|&x| x == b) {
                blocks.swap_remove(i);
            }
            // SAFETY: a free block belongs to the producer and is on no
            // list any more: nobody can reach it.
            drop(unsafe { Box::from_raw(b) });
            gone += 1;
        }
        gone
    }

    /// Blocks allocated (the tests and the report).
    pub fn blocks(&self) -> usize {
        // SAFETY: the producer's own list (module invariants).
        unsafe { (*self.ring.blocks.get()).len() }
    }
}

impl<T: Copy + Send> Consumer<T> {
    /// True if published messages are waiting (a cheap check before
    /// sleeping).
    pub fn has_pending(&self) -> bool {
        self.ring.tail.0.load(Ordering::SeqCst) != self.head
    }

    /// The next published message.
    pub fn pop(&mut self) -> Option<T> {
        self.pop_with(|m| *m)
    }

    /// Hand the next published message to `f` where it lies in the queue
    /// (no copy out of the slot), then consume it.
    #[inline]
    pub fn pop_with<R>(&mut self, f: impl FnOnce(&T) -> R) -> Option<R> {
        if self.head == self.tail_cache {
            self.tail_cache = self.ring.tail.0.load(Ordering::Acquire);
            if self.head == self.tail_cache {
                return None;
            }
        }
        let idx = self.head & (self.ring.block - 1);
        if idx == 0 && self.head != 0 {
            // Into the next block; the one read goes back.
            // SAFETY: message `head` is published (Acquire on `tail`), so
            // the producer linked its block before (Release on `next`).
            let next = unsafe { (*self.block).next.load(Ordering::Acquire) };
            let done = std::mem::replace(&mut self.block, next);
            if let (Some(g), false) = (self.giveback.as_mut(), done == next) {
                // The return ring holds every block there is: never full.
                let _ = g.push(done as usize);
                g.publish();
            }
        }
        // SAFETY: head < tail (published with Release, read with Acquire):
        // the producer wrote this slot and will not touch it until we
        // release it, which needs `&mut self` and so cannot happen while
        // `f` holds the reference.
        let r = unsafe {
            let slot = &(&(*self.block).slots)[idx];
            f((*slot.get()).assume_init_ref())
        };
        self.head += 1;
        Some(r)
    }

    /// Give the consumed slots back to the producer. Returns true if the
    /// producer had found the queue full and should be woken.
    pub fn release(&mut self) -> bool {
        if self.head == self.released {
            return false;
        }
        self.ring.head.0.store(self.head, Ordering::SeqCst);
        self.released = self.head;
        self.ring.producer_waiting.swap(false, Ordering::SeqCst)
    }
}

/// How another thread wakes a worker's event loop: the worker marks itself
/// sleeping before it blocks (then re-checks its inputs); a producer that
/// published something wakes it only if it is sleeping, so a busy worker
/// is never woken and a batch costs at most one wake-up.
///
/// A sleeping worker also says when it will wake on its own (its next
/// KIST run, say); a producer whose input can wait that long does not wake
/// it ([`Self::notify_unless_due`]): cells for a connection are written at
/// the KIST run either way, so waking the worker earlier only to queue
/// them costs a wake-up and changes nothing on the wire.
pub struct Notifier {
    sleeping: AtomicBool,
    /// While sleeping: when the worker wakes by itself, in ns of the
    /// workers' shared clock (`u64::MAX`: not by itself).
    wakes_at_ns: AtomicU64,
    waker: mio::Waker,
    /// The waker of the worker's quiet poll (only wake-ups, no sockets),
    /// woken with `waker`.
    quiet: Option<mio::Waker>,
}

impl Notifier {
    /// A notifier around a mio waker.
    pub fn new(waker: mio::Waker) -> Self {
        Notifier {
            sleeping: AtomicBool::new(false),
            wakes_at_ns: AtomicU64::new(u64::MAX),
            waker,
            quiet: None,
        }
    }

    /// A notifier around the wakers of a worker's poll and of its quiet
    /// poll (a sleep that only wake-ups end, not sockets); every wake-up
    /// goes to both.
    pub fn with_quiet(waker: mio::Waker, quiet: mio::Waker) -> Self {
        Notifier {
            quiet: Some(quiet),
            ..Notifier::new(waker)
        }
    }

    fn send_wake(&self) {
        let _ = self.waker.wake();
        if let Some(q) = &self.quiet {
            let _ = q.wake();
        }
    }

    /// Worker side: about to block. The caller must check its inputs again
    /// after this and call [`Self::awake`] if it will not block.
    pub fn going_to_sleep(&self) {
        self.going_to_sleep_until(u64::MAX);
    }

    /// Worker side: about to block until `wakes_at_ns` (the shared clock)
    /// at the latest. As [`Self::going_to_sleep`].
    pub fn going_to_sleep_until(&self, wakes_at_ns: u64) {
        self.wakes_at_ns.store(wakes_at_ns, Ordering::SeqCst);
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// Worker side: not (or no longer) blocking.
    pub fn awake(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// Producer side: new input was published; wake the worker if it sleeps.
    /// Returns true if a wake-up was sent.
    pub fn notify(&self) -> bool {
        self.notify_unless_due(0, 0)
    }

    /// Producer side, at `now_ns` (the shared clock): new input was
    /// published that may wait `defer_ns`; wake the worker if it sleeps
    /// and will not wake by itself by then. Returns true if a wake-up was
    /// sent.
    pub fn notify_unless_due(&self, now_ns: u64, defer_ns: u64) -> bool {
        if !self.sleeping.load(Ordering::SeqCst) {
            return false;
        }
        // Read after `sleeping`: the deadline of this sleep or a later one.
        if self.wakes_at_ns.load(Ordering::SeqCst) <= now_ns.saturating_add(defer_ns) {
            return false;
        }
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.send_wake();
            return true;
        }
        false
    }

    /// Wake unconditionally (control messages, shutdown).
    pub fn wake(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
        self.send_wake();
    }
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("sleeping", &self.sleeping.load(Ordering::Relaxed))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_and_batches() {
        let (mut p, mut c) = ring::<u64>(4);
        assert_eq!(p.capacity(), 4);
        for i in 0..4 {
            p.push(i).unwrap();
        }
        assert_eq!(p.push(9), Err(9), "full");
        assert_eq!(c.pop(), None, "nothing published yet");
        assert!(p.publish());
        assert!(!p.publish());
        assert_eq!((c.pop(), c.pop()), (Some(0), Some(1)));
        assert!(c.release(), "the producer was waiting on a full ring");
        p.push(4).unwrap();
        p.push(5).unwrap();
        p.publish();
        let rest: Vec<u64> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(rest, vec![2, 3, 4, 5]);
        assert!(!c.release());
    }

    #[test]
    fn asking_for_room_registers_for_the_wake_up_when_there_is_too_little() {
        let (mut p, mut c) = ring::<u64>(4);
        assert!(p.has_room_or_ask_wake(4));
        for i in 0..3 {
            assert!(p.has_room(4 - i as usize));
            p.push(i).unwrap();
        }
        assert!(!p.has_room(2), "asking without registering");
        assert!(p.has_room_or_ask_wake(1), "one slot free");
        assert!(!p.has_room_or_ask_wake(2), "not two");
        p.publish();
        assert_eq!(c.pop(), Some(0));
        assert!(c.release(), "the producer asked to be told");
        assert!(p.has_room_or_ask_wake(2));
        assert_eq!(c.pop(), Some(1));
        assert!(!c.release(), "it had room: nobody to wake");
    }

    /// The room grows by blocks as messages wait and no further than the
    /// capacity; a consumer that keeps up keeps the producer on the same
    /// two blocks; a burst's blocks go back when the producer shrinks.
    #[test]
    fn a_message_is_finished_in_its_slot_before_it_is_published() {
        let (mut p, mut c) = ring::<[u64; 4]>(2);
        for i in 0..3u64 {
            let r = p.push_filled(|| [i, 0, 0, 0], |m| m[1..].copy_from_slice(&[i + 1; 3]));
            assert_eq!(r.is_ok(), i < 2, "the third finds the queue full");
        }
        assert_eq!(c.pop(), None, "nothing before publish");
        p.publish();
        assert_eq!(c.pop(), Some([0, 1, 1, 1]));
        assert_eq!(c.pop(), Some([1, 2, 2, 2]));
        assert_eq!(c.pop(), None);
    }

    #[test]
    fn blocks_follow_what_is_in_flight() {
        let (mut p, mut c) = ring::<u64>(8 * BLOCK);
        assert_eq!((p.capacity(), p.blocks()), (8 * BLOCK, 1));
        // Kept nearly empty: two blocks, however many messages pass.
        for i in 0..100 * (BLOCK as u64) {
            p.push(i).unwrap();
            p.publish();
            assert_eq!(c.pop(), Some(i));
            c.release();
        }
        assert!(p.blocks() <= 2, "{} blocks", p.blocks());
        // A burst fills the whole capacity: the room grows, then stops.
        let mut n = 0u64;
        while p.push(n).is_ok() {
            n += 1;
        }
        assert_eq!(n, 8 * (BLOCK as u64));
        assert!(p.blocks() <= 8 + 2);
        p.publish();
        let got: Vec<u64> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(got, (0..n).collect::<Vec<_>>());
        assert!(c.release(), "the producer was waiting");
        // Once read, all but the blocks in use can go back.
        p.push(7).unwrap();
        let before = p.blocks();
        let gone = p.shrink(0);
        assert!(gone >= before - 3, "{gone} of {before}");
        assert!(p.blocks() >= 1);
        p.publish();
        assert_eq!(c.pop(), Some(7));
        // And it grows again after a shrink.
        for i in 0..4 * (BLOCK as u64) {
            p.push(i).unwrap();
        }
        p.publish();
        assert_eq!(c.pop_with(|&m| m), Some(0));
    }

    /// A sleeping worker that wakes by itself before the input's deadline
    /// is not woken; one that would sleep longer is, once.
    #[test]
    fn notifier_wakes_only_a_worker_that_would_sleep_too_long() {
        let mut poll = mio::Poll::new().unwrap();
        let n = Notifier::new(mio::Waker::new(poll.registry(), mio::Token(7)).unwrap());
        let mut events = mio::Events::with_capacity(4);
        let woken = |poll: &mut mio::Poll, events: &mut mio::Events| {
            poll.poll(events, Some(std::time::Duration::ZERO)).unwrap();
            events.iter().any(|e| e.token() == mio::Token(7))
        };
        assert!(!n.notify(), "an awake worker is never woken");
        // Sleeps until 1000; input at 500 that may wait 600 ns: no wake-up.
        n.going_to_sleep_until(1000);
        assert!(!n.notify_unless_due(500, 600));
        assert!(!woken(&mut poll, &mut events));
        // Input that may wait only 100 ns: woken, once.
        assert!(n.notify_unless_due(500, 100));
        assert!(!n.notify_unless_due(500, 100), "already woken");
        assert!(woken(&mut poll, &mut events));
        n.awake();
        // Sleeping with no deadline of its own: always woken.
        n.going_to_sleep();
        assert!(n.notify_unless_due(500, u64::MAX / 2));
        assert!(woken(&mut poll, &mut events));
    }

    /// A worker in its quiet sleep (a poll with only a waker) is woken by
    /// what wakes its main poll, and by nothing a socket does: the urgent
    /// ring and the inbox still end the sleep early.
    #[test]
    fn a_wake_up_ends_the_quiet_sleep_too() {
        let mut poll = mio::Poll::new().unwrap();
        let mut quiet = mio::Poll::new().unwrap();
        let n = Notifier::with_quiet(
            mio::Waker::new(poll.registry(), mio::Token(7)).unwrap(),
            mio::Waker::new(quiet.registry(), mio::Token(7)).unwrap(),
        );
        let mut events = mio::Events::with_capacity(4);
        let woken = |poll: &mut mio::Poll, events: &mut mio::Events| {
            poll.poll(events, Some(std::time::Duration::ZERO)).unwrap();
            events.iter().any(|e| e.token() == mio::Token(7))
        };
        // A socket that becomes readable wakes the main poll only.
        let listener = mio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut l = listener;
        poll.registry()
            .register(&mut l, mio::Token(1), mio::Interest::READABLE)
            .unwrap();
        let _client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        quiet
            .poll(&mut events, Some(std::time::Duration::from_millis(50)))
            .unwrap();
        assert!(events.is_empty(), "a socket does not end the quiet sleep");
        // The KIST run is 1000 away: input that can wait for it wakes nobody.
        n.going_to_sleep_until(1000);
        assert!(!n.notify_unless_due(500, 600));
        assert!(!woken(&mut quiet, &mut events));
        // Urgent input: both polls see the wake-up.
        assert!(n.notify());
        assert!(woken(&mut quiet, &mut events));
        assert!(woken(&mut poll, &mut events));
        n.awake();
        // The inbox's wake-up too.
        n.wake();
        assert!(woken(&mut quiet, &mut events));
    }

    /// Two threads, a million messages through a small ring in random
    /// batches: every message arrives once, in order.
    #[test]
    fn threads_keep_order_under_pressure() {
        threads_keep_order(64);
    }

    /// The same through a ring of many blocks, which the producer links
    /// and the consumer gives back while both run, and which shrinks now
    /// and then.
    #[test]
    fn threads_keep_order_across_blocks() {
        threads_keep_order(16 * BLOCK);
    }

    fn threads_keep_order(capacity: usize) {
        const N: u64 = 1_000_000;
        let (mut p, mut c) = ring::<[u64; 8]>(capacity);
        let prod = std::thread::spawn(move || {
            let mut i = 0u64;
            let mut batch = 0;
            while i < N {
                match p.push([i; 8]) {
                    Ok(()) => {
                        i += 1;
                        batch += 1;
                        if batch == (i % 37) + 1 {
                            p.publish();
                            batch = 0;
                        }
                    }
                    Err(_) => {
                        p.publish();
                        if i.is_multiple_of(3) {
                            p.shrink(1);
                        }
                        std::hint::spin_loop();
                    }
                }
            }
            p.publish();
        });
        let mut want = 0u64;
        while want < N {
            while let Some(m) = c.pop() {
                assert_eq!(m, [want; 8]);
                want += 1;
            }
            c.release();
            std::hint::spin_loop();
        }
        prod.join().unwrap();
        assert_eq!(c.pop(), None);
    }
}
