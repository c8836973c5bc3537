//! Every interleaving of connection moves with the events that race them,
//! for small cases, exhaustively: the circuit client → (conn 1) → keyed
//! half | relabel half → (conn 2) → next relay on two workers, cells
//! already in flight both ways, and a multiset of events — a cell from
//! either end, a move of either connection (asked as the controller asks:
//! one at a time; refused while a half still waits for a marker or the
//! connection waits for ring room, as the worker refuses), a DESTROY from
//! either end, and rounds of each worker taken separately, so that one
//! worker runs ahead of the other — run in every distinct order. Rings of
//! one slot make "ring full" part of every case. After each order the
//! network settles; every cell must have arrived once and in order (all
//! of them without a DESTROY; a prefix with one, and then nothing of the
//! circuit is left and no cell slot leaks). Each test prints how many
//! orders it ran.

use super::migrate::migration_done;
use super::*;

/// One event of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The client sends a DATA cell (unless conn 1 waits for ring room).
    Up,
    /// The next relay sends a DATA cell (unless conn 2 waits).
    Down,
    /// Move conn 1 to the other worker.
    Move1,
    /// Move conn 2 to the other worker.
    Move2,
    /// One round of worker 0: its inbox, its rings in, its rings out, and
    /// the writes of the connections it holds.
    Round0,
    /// One round of worker 1.
    Round1,
    /// The client sends DESTROY.
    DestroyUp,
    /// The next relay sends DESTROY.
    DestroyDown,
}

/// The next order of a multiset (lexicographic), false after the last.
fn next_order(v: &mut [Ev]) -> bool {
    let Some(i) = (1..v.len()).rev().find(|&i| v[i - 1] < v[i]) else {
        return false;
    };
    let j = (i..v.len()).rev().find(|&j| v[j] > v[i - 1]).unwrap();
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}

/// One run: the network and what each end sent and got.
struct Run {
    net: Net,
    at: [usize; 3],
    client: OriginCircuit,
    next: NextRelay,
    circ: u32,
    relabel: u32,
    sent_fwd: u32,
    sent_back: u32,
    fwd: Vec<Out>,
    back: Vec<Out>,
    /// A move not yet reported over by its new worker.
    moving: Option<u64>,
    destroyed: bool,
    moves: u32,
}

impl Run {
    fn new(ring: usize, b: usize) -> Run {
        let mut net = Net::new(2, ring);
        let (client, next, circ, relabel) = two_hop(&mut net, 0, b);
        let mut r = Run {
            net,
            at: [0, 0, b],
            client,
            next,
            circ,
            relabel,
            sent_fwd: 0,
            sent_back: 0,
            fwd: Vec::new(),
            back: Vec::new(),
            moving: None,
            destroyed: false,
            moves: 0,
        };
        // In flight before the first event: queued, on the rings, not yet
        // published.
        for _ in 0..2 {
            r.up();
            r.down();
        }
        r
    }

    fn up(&mut self) {
        let w = self.at[1];
        if self.destroyed || self.net.cores[w].is_stalled(1) {
            return;
        }
        let mut b = client_data(&mut self.client, self.sent_fwd);
        self.sent_fwd += 1;
        self.net.cell(w, 1, self.circ, cmd::RELAY, &mut b);
    }

    fn down(&mut self) {
        let w = self.at[2];
        if self.destroyed || self.net.cores[w].is_stalled(2) {
            return;
        }
        let mut d = self.next.data(&self.sent_back.to_be_bytes());
        self.sent_back += 1;
        self.net.cell(w, 2, self.relabel, cmd::RELAY, &mut d);
    }

    /// As the controller asks and the worker answers: one move at a time,
    /// refused while the connection is busy.
    fn move_conn(&mut self, conn: usize) {
        if let Some(id) = self.moving {
            if !migration_done(&mut self.net, id) {
                return;
            }
            self.moving = None;
        }
        let from = self.at[conn];
        if !self.net.cores[from].can_detach(conn) {
            return;
        }
        let to = 1 - from;
        let moved = self.net.cores[from].detach(conn).expect("detached");
        let id = moved.id;
        self.net.collect(from);
        self.net.cores[to].attach(conn, moved, from as u16);
        self.net.collect(to);
        self.at[conn] = to;
        self.moving = Some(id);
        self.moves += 1;
    }

    fn destroy(&mut self, from_client: bool) {
        if self.destroyed {
            return;
        }
        self.destroyed = true;
        let reason = &mut pad(&[destroy_reason::REQUESTED]);
        if from_client {
            self.net
                .cell(self.at[1], 1, self.circ, cmd::DESTROY, reason);
        } else {
            self.net
                .cell(self.at[2], 2, self.relabel, cmd::DESTROY, reason);
        }
    }

    /// Write what the connections on worker `w` have (as its driver would).
    fn write(&mut self, w: usize) {
        if self.at[2] == w {
            self.fwd.extend(self.net.written(w, 2));
        }
        if self.at[1] == w {
            self.back.extend(self.net.written(w, 1));
        }
    }

    fn event(&mut self, e: Ev) {
        match e {
            Ev::Up => self.up(),
            Ev::Down => self.down(),
            Ev::Move1 => self.move_conn(1),
            Ev::Move2 => self.move_conn(2),
            Ev::Round0 | Ev::Round1 => {
                let w = usize::from(e == Ev::Round1);
                self.net.round(w);
                self.write(w);
            }
            Ev::DestroyUp => self.destroy(true),
            Ev::DestroyDown => self.destroy(false),
        }
    }

    /// Settle, then check every cell: all, once, in order; or, after a
    /// DESTROY, a prefix, and the circuit gone from both workers.
    fn finish(mut self, order: &[Ev]) {
        let ctx = |what: &str| format!("{what}; order {order:?}");
        for _ in 0..MAX_STEPS {
            let moved = self.net.step();
            self.write(0);
            self.write(1);
            if !moved {
                break;
            }
        }
        if !self.destroyed {
            // More cells after the dust settled: the circuit still works.
            for _ in 0..2 {
                self.up();
                self.down();
            }
            self.net.settle();
            self.write(0);
            self.write(1);
        }
        let fwd = std::mem::take(&mut self.fwd);
        let mut got = Vec::new();
        let mut after_destroy = false;
        for o in fwd {
            assert!(
                !after_destroy,
                "{}",
                ctx("a cell after DESTROY toward the next relay")
            );
            assert_eq!(o.circ_id, self.relabel, "{}", ctx("forward circuit ID"));
            if o.command == cmd::DESTROY {
                after_destroy = true;
                continue;
            }
            let mut b = o.body;
            let (c, d) = self.next.read(&mut b).unwrap_or_else(|| {
                panic!("{}", ctx("forward cell not recognized (lost or reordered)"))
            });
            assert_eq!(c, relay_cmd::DATA, "{}", ctx("forward command"));
            got.push(u32::from_be_bytes(d[..4].try_into().unwrap()));
        }
        let want: Vec<u32> = (0..got.len() as u32).collect();
        assert_eq!(got, want, "{}", ctx("forward: once each, in order"));
        if !self.destroyed {
            assert_eq!(
                got.len() as u32,
                self.sent_fwd,
                "{}",
                ctx("forward: every cell")
            );
        }
        let back = std::mem::take(&mut self.back);
        let mut got = Vec::new();
        let mut after_destroy = false;
        for o in back {
            assert!(
                !after_destroy,
                "{}",
                ctx("a cell after DESTROY toward the client")
            );
            if o.command == cmd::DESTROY {
                after_destroy = true;
                continue;
            }
            let mut b = o.body;
            let (_, h) = self.client.on_backward(&mut b).unwrap_or_else(|_| {
                panic!("{}", ctx("backward cell undecryptable (lost or reordered)"))
            });
            got.push(u32::from_be_bytes(
                relay::data(&b, &h)[..4].try_into().unwrap(),
            ));
        }
        let want: Vec<u32> = (0..got.len() as u32).collect();
        assert_eq!(got, want, "{}", ctx("backward: once each, in order"));
        if !self.destroyed {
            assert_eq!(
                got.len() as u32,
                self.sent_back,
                "{}",
                ctx("backward: every cell")
            );
        } else {
            for w in 0..2 {
                assert_eq!(
                    self.net.cores[w].circuit_count(1),
                    0,
                    "{}",
                    ctx("conn 1 empty")
                );
                assert_eq!(
                    self.net.cores[w].circuit_count(2),
                    0,
                    "{}",
                    ctx("conn 2 empty")
                );
            }
            assert!(pool_empty(&self.net), "{}", ctx("no cell slot leaked"));
        }
    }
}

/// Run every distinct order of `events` for each ring size and placement
/// of the next relay's connection; the number of runs.
fn explore(events: &[Ev]) -> (u64, u32) {
    let mut runs = 0;
    let mut most_moves = 0;
    for b in [0, 1] {
        let mut order = events.to_vec();
        order.sort();
        loop {
            let mut r = Run::new(1, b);
            for &e in &order {
                r.event(e);
            }
            most_moves = most_moves.max(r.moves);
            r.finish(&order);
            runs += 1;
            if !next_order(&mut order) {
                break;
            }
        }
    }
    (runs, most_moves)
}

#[test]
fn next_order_visits_each_distinct_order_once() {
    let mut v = vec![Ev::Up, Ev::Up, Ev::Down, Ev::Round0];
    let mut seen = std::collections::BTreeSet::new();
    loop {
        assert!(seen.insert(v.clone()));
        if !next_order(&mut v) {
            break;
        }
    }
    assert_eq!(seen.len(), 12); // 4! / 2!
}

/// Moves of both connections racing cells both ways and the workers'
/// rounds in every order.
#[test]
fn every_order_of_two_moves_with_cells_and_rounds_keeps_every_cell() {
    use Ev::*;
    let (runs, most) = explore(&[Up, Down, Move1, Move2, Round0, Round1, Round0, Round1]);
    println!("explored {runs} orders (most moves in one: {most})");
    assert_eq!(runs, 2 * 10080); // 8! / (2! 2!) orders, two placements
    assert_eq!(most, 2, "some orders move both connections");
}

/// A DESTROY from either end racing a move, cells and rounds.
#[test]
fn every_order_of_a_move_and_a_destroy_leaves_nothing_behind() {
    use Ev::*;
    let mut runs = 0;
    for destroy in [DestroyUp, DestroyDown] {
        for mv in [Move1, Move2] {
            runs += explore(&[Up, Down, mv, destroy, Round0, Round1, Round0]).0;
        }
    }
    println!("explored {runs} orders");
    assert_eq!(runs, 4 * 2 * 2520); // 7! / 2! orders, two placements
}

/// Two moves of the same connection (away and back) racing cells.
#[test]
fn every_order_of_a_move_away_and_back_keeps_every_cell() {
    use Ev::*;
    let mut runs = 0;
    for mv in [Move1, Move2] {
        let (n, most) = explore(&[Up, Down, mv, mv, Round0, Round1, Round0, Round1]);
        assert_eq!(most, 2, "some orders move it away and back");
        runs += n;
    }
    println!("explored {runs} orders");
    assert_eq!(runs, 2 * 2 * 5040); // 8! / (2! 2! 2!) orders, two placements
}
