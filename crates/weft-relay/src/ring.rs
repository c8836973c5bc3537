//! The cross-worker cell channel: a bounded single-producer single-consumer
//! ring of fixed-size messages, one per ordered pair of workers.
//!
//! It is built for batches: the producer writes any number of messages and
//! makes them visible with one release store ([`Producer::publish`]); the
//! consumer reads everything visible and frees the space with one store
//! ([`Consumer::release`]). Nothing allocates after construction and nothing
//! locks. Waking the consumer's event loop is the caller's business, once per
//! published batch, through a [`Notifier`] (see the worker).
//!
//! This is the only `unsafe` data structure in weft-relay. The invariant:
//! slots in `[head, tail)` (published, not yet consumed) belong to the
//! consumer, which only reads them; all other slots belong to the producer,
//! which only writes them. `tail` is advanced by the producer with Release
//! after writing, read by the consumer with Acquire before reading; `head`
//! likewise in the other direction. Messages are `Copy`, so no destructor
//! ever runs on a slot.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Keeps the two indices on separate cache lines (no false sharing between
/// the producer's and the consumer's cores).
#[repr(align(64))]
struct Padded(AtomicUsize);

struct Ring<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    head: Padded,
    tail: Padded,
    /// The producer found the ring full and wants to hear when it drains.
    producer_waiting: AtomicBool,
}

// SAFETY: the ring hands each slot to exactly one side at a time (see the
// module invariant); T: Send is required to move messages across threads.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Ring<T> {}

/// The writing end.
pub struct Producer<T> {
    ring: Arc<Ring<T>>,
    /// Next slot to write (not yet published beyond `published`).
    tail: usize,
    published: usize,
    /// Last seen consumer head (refreshed only when the ring looks full).
    head_cache: usize,
}

/// The reading end.
pub struct Consumer<T> {
    ring: Arc<Ring<T>>,
    head: usize,
    released: usize,
    tail_cache: usize,
}

/// A ring with room for `capacity` messages (rounded up to a power of two).
pub fn ring<T: Copy + Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let cap = capacity.max(2).next_power_of_two();
    let slots: Box<[UnsafeCell<MaybeUninit<T>>]> = (0..cap)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let r = Arc::new(Ring {
        slots,
        mask: cap - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
        producer_waiting: AtomicBool::new(false),
    });
    (
        Producer {
            ring: r.clone(),
            tail: 0,
            published: 0,
            head_cache: 0,
        },
        Consumer {
            ring: r,
            head: 0,
            released: 0,
            tail_cache: 0,
        },
    )
}

impl<T: Copy + Send> Producer<T> {
    /// Capacity of the ring.
    pub fn capacity(&self) -> usize {
        self.ring.mask + 1
    }

    /// Write `msg` (not yet visible); `Err(msg)` if the ring is full. On
    /// full, the producer is registered to be told (by
    /// [`Consumer::release`] returning true) when space frees up.
    #[inline]
    pub fn push(&mut self, msg: T) -> Result<(), T> {
        self.push_with(|| msg).map_err(|make| make())
    }

    /// Like [`Self::push`], but the message is made by `make` straight
    /// into its slot (a cell's body is copied once, from where it was read
    /// into the ring); `Err(make)` if the ring is full.
    #[inline]
    pub fn push_with<F: FnOnce() -> T>(&mut self, make: F) -> Result<(), F> {
        if self.tail - self.head_cache > self.ring.mask {
            self.head_cache = self.ring.head.0.load(Ordering::Acquire);
            if self.tail - self.head_cache > self.ring.mask {
                self.ring.producer_waiting.store(true, Ordering::SeqCst);
                // Re-check: the consumer may have drained in between.
                self.head_cache = self.ring.head.0.load(Ordering::SeqCst);
                if self.tail - self.head_cache > self.ring.mask {
                    return Err(make);
                }
                self.ring.producer_waiting.store(false, Ordering::Relaxed);
            }
        }
        let slot = &self.ring.slots[self.tail & self.ring.mask];
        // SAFETY: `tail - head <= mask`, so this slot is outside
        // [head, tail): the consumer does not read it until we publish.
        unsafe { (*slot.get()).write(make()) };
        self.tail += 1;
        Ok(())
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

    /// Hand the next published message to `f` where it lies in the ring
    /// (no copy out of the slot), then consume it.
    #[inline]
    pub fn pop_with<R>(&mut self, f: impl FnOnce(&T) -> R) -> Option<R> {
        if self.head == self.tail_cache {
            self.tail_cache = self.ring.tail.0.load(Ordering::Acquire);
            if self.head == self.tail_cache {
                return None;
            }
        }
        let slot = &self.ring.slots[self.head & self.ring.mask];
        // SAFETY: head < tail (published with Release, read with Acquire):
        // the producer wrote this slot and will not touch it until we
        // release it, which needs `&mut self` and so cannot happen while
        // `f` holds the reference.
        let r = f(unsafe { (*slot.get()).assume_init_ref() });
        self.head += 1;
        Some(r)
    }

    /// Give the consumed slots back to the producer. Returns true if the
    /// producer had found the ring full and should be woken.
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
        const N: u64 = 1_000_000;
        let (mut p, mut c) = ring::<[u64; 8]>(64);
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
