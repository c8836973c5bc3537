//! Every interleaving of connection moves with the events that race them,
//! for small cases, exhaustively: the circuit client → (conn 1) → keyed
//! half | relabel half → (conn 2) → next relay on two workers, cells
//! already in flight both ways, and a multiset of events — a cell from
//! either end, a move of either connection (asked as the controller asks:
//! one at a time; refused while a half still waits for a marker, as the
//! worker refuses; a half with cells waiting for ring room moves with
//! them), a DESTROY from
//! either end, and rounds of each worker taken separately, so that one
//! worker runs ahead of the other — run in every distinct order. Rings of
//! one slot make "ring full" part of every case: cells wait in their
//! half's crossing queue, and a move or a peer's move finds them there. After each order the
//! network settles; every cell must have arrived once and in order (all
//! of them without a DESTROY; a prefix with one, and then nothing of the
//! circuit is left and no cell slot leaks). Each test prints how many
//! orders it ran.
//!
//! Two more shapes: three workers (a move goes to the next worker, so a
//! peer's worker is neither the old nor the new one), and a circuit whose
//! extend is still pending — the controller's answer (the relabel half
//! made on the next relay's connection), the next relay's CREATED2 and
//! the moves of both connections race, and the client must get its
//! EXTENDED2 and then every cell both ways.

use super::migrate::migration_done;
use super::*;

/// One event of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The client sends a DATA cell (which may wait for ring room in its
    /// half's crossing queue).
    Up,
    /// The next relay sends a DATA cell.
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
    /// One round of worker 2 (three workers).
    Round2,
    /// A pending extend: the controller found the next relay's connection
    /// (on the worker that holds it now), which makes the relabel half
    /// and its CREATE2.
    Outbound,
    /// A pending extend: the next relay answers the CREATE2 it read.
    Created,
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
    /// Moves made while a half of the moving connection, or its peer,
    /// had cells waiting in its crossing queue (the per-circuit queue a
    /// move must carry or readdress in order).
    moves_with_crossing: u32,
    /// The circuit's extend, when the run starts with it pending.
    extend: Option<PendingExtend>,
}

/// An extend that is still pending when a run starts.
struct PendingExtend {
    /// The keyed half that asked.
    from: HalfRef,
    /// The CREATE2 body the controller passes on.
    create2: Vec<u8>,
    /// The controller answered (`Ev::Outbound`).
    outbound: bool,
    /// The CREATE2 the next relay read (its body), once written.
    read: Option<[u8; BODY_LEN]>,
    /// The next relay answered it.
    answered: bool,
    /// The client took its EXTENDED2.
    extended: bool,
}

impl Run {
    /// A built circuit on `n` workers (conn 1 on worker 0, conn 2 on `b`).
    fn new(n: usize, ring: usize, b: usize) -> Run {
        let mut net = Net::new(n, ring);
        let (client, next, circ, relabel) = two_hop(&mut net, 0, b);
        let mut r = Run::start(net, b, (client, next), (circ, relabel), None);
        // In flight before the first event: queued, on the rings, not yet
        // published.
        for _ in 0..2 {
            r.up();
            r.down();
        }
        r
    }

    /// A circuit whose extend to the next relay is pending: the client's
    /// EXTEND2 reached the keyed half on worker 0, the controller has not
    /// answered yet (conn 2 on worker `b`).
    fn extending(n: usize, ring: usize, b: usize) -> Run {
        let mut net = Net::new(n, ring);
        net.open(0, 1, false);
        net.open(b, 2, true);
        let mut client = OriginCircuit::new();
        let create2 = client.create2(&target(net.relay, 9001)).unwrap();
        let circ = 0x8000_0001;
        net.cell(0, 1, circ, cmd::CREATE2, &mut pad(&create2));
        let out = net.written(0, 1);
        let hlen = usize::from(u16::from_be_bytes([out[0].body[0], out[0].body[1]]));
        client.on_created2(&out[0].body[..2 + hlen]).unwrap();
        let next = NextRelay::new(&net._dir.path().join("next"));
        let mut ext = [0u8; BODY_LEN];
        client.extend2(&target(next.keys, 9002), &mut ext).unwrap();
        net.cell(0, 1, circ, cmd::RELAY_EARLY, &mut ext);
        let Some(ControllerMsg::Extend { from, req, .. }) = net.controller.pop() else {
            panic!("no extend request");
        };
        let extend = PendingExtend {
            from,
            create2: req.create2,
            outbound: false,
            read: None,
            answered: false,
            extended: false,
        };
        Run::start(net, b, (client, next), (circ, 0), Some(extend))
    }

    /// A run of `net` before its first event: conn 2 on worker `b`, the
    /// circuit's two ends and IDs (the relabel half's 0 while `extend`
    /// is pending), nothing sent.
    fn start(
        net: Net,
        b: usize,
        (client, next): (OriginCircuit, NextRelay),
        (circ, relabel): (u32, u32),
        extend: Option<PendingExtend>,
    ) -> Run {
        Run {
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
            moves_with_crossing: 0,
            extend,
        }
    }

    /// The client may send to the next relay (its extend is done).
    fn client_ready(&self) -> bool {
        self.extend.as_ref().is_none_or(|e| e.extended)
    }

    /// The next relay may send (it answered the CREATE2).
    fn next_ready(&self) -> bool {
        self.extend.as_ref().is_none_or(|e| e.answered)
    }

    /// The controller's answer to the extend, to the worker that holds
    /// conn 2 now.
    fn outbound(&mut self) {
        let w = self.at[2];
        let Some(e) = self.extend.as_mut().filter(|e| !e.outbound) else {
            return;
        };
        e.outbound = true;
        self.net.cores[w].create_outbound(Some(2), e.from, &e.create2);
        self.net.collect(w);
    }

    /// The next relay answers the CREATE2 it read.
    fn created(&mut self) {
        let w = self.at[2];
        let Some(e) = self.extend.as_mut().filter(|e| !e.answered) else {
            return;
        };
        let Some(body) = e.read else { return };
        e.answered = true;
        let mut created = self.next.answer(&body);
        self.net
            .cell(w, 2, self.relabel, cmd::CREATED2, &mut created);
    }

    fn up(&mut self) {
        if !self.client_ready() {
            return;
        }
        let w = self.at[1];
        if self.destroyed {
            return;
        }
        let mut b = client_data(&mut self.client, self.sent_fwd);
        self.sent_fwd += 1;
        self.net.cell(w, 1, self.circ, cmd::RELAY, &mut b);
    }

    fn down(&mut self) {
        if !self.next_ready() {
            return;
        }
        let w = self.at[2];
        if self.destroyed {
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
        let to = (from + 1) % self.net.cores.len();
        let other = 3 - conn;
        if self.crossing_on(from, conn) + self.crossing_on(self.at[other], other) > 0 {
            self.moves_with_crossing += 1;
        }
        let moved = self.net.cores[from].detach(conn).expect("detached");
        let id = moved.id;
        self.net.collect(from);
        self.net.cores[to].attach(conn, moved, from as u16);
        self.net.collect(to);
        self.at[conn] = to;
        self.moving = Some(id);
        self.moves += 1;
    }

    /// Cells the halves of connection `conn` on worker `w` have waiting
    /// to cross.
    fn crossing_on(&self, w: usize, conn: usize) -> usize {
        let c = &self.net.cores[w];
        c.conn(conn).map_or(0, |cc| {
            cc.circuits.values().map(|&s| c.crossing_len(s)).sum()
        })
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
    /// (A pending extend's CREATE2 goes to the next relay, its EXTENDED2
    /// to the client, as they are written.)
    fn write(&mut self, w: usize) {
        if self.at[2] == w {
            for o in self.net.written(w, 2) {
                match self.extend.as_mut() {
                    Some(e) if o.command == cmd::CREATE2 => {
                        assert!(e.read.is_none(), "one CREATE2");
                        e.read = Some(o.body);
                        self.relabel = o.circ_id;
                    }
                    _ => self.fwd.push(o),
                }
            }
        }
        if self.at[1] == w {
            for o in self.net.written(w, 1) {
                match self.extend.as_mut() {
                    Some(e) if !e.extended && o.command == cmd::RELAY => {
                        let mut b = o.body;
                        let (hop, h) = self.client.on_backward(&mut b).expect("EXTENDED2");
                        assert_eq!((hop, h.command), (0, relay_cmd::EXTENDED2));
                        self.client
                            .on_extended2(relay::data(&b, &h))
                            .expect("the next relay's answer");
                        e.extended = true;
                    }
                    _ => self.back.push(o),
                }
            }
        }
    }

    /// Settle every worker, writing as the drivers would.
    fn settle_and_write(&mut self) {
        for _ in 0..MAX_STEPS {
            let moved = self.net.step();
            for w in 0..self.net.cores.len() {
                self.write(w);
            }
            if !moved {
                break;
            }
        }
    }

    fn event(&mut self, e: Ev) {
        match e {
            Ev::Up => self.up(),
            Ev::Down => self.down(),
            Ev::Move1 => self.move_conn(1),
            Ev::Move2 => self.move_conn(2),
            Ev::Round0 | Ev::Round1 | Ev::Round2 => {
                let w = match e {
                    Ev::Round0 => 0,
                    Ev::Round1 => 1,
                    _ => 2,
                };
                if w < self.net.cores.len() {
                    self.net.round(w);
                    self.write(w);
                }
            }
            Ev::Outbound => self.outbound(),
            Ev::Created => self.created(),
            Ev::DestroyUp => self.destroy(true),
            Ev::DestroyDown => self.destroy(false),
        }
    }

    /// Settle, then check every cell: all, once, in order; or, after a
    /// DESTROY, a prefix, and the circuit gone from both workers.
    fn finish(mut self, order: &[Ev]) {
        let ctx = |what: &str| format!("{what}; order {order:?}");
        self.settle_and_write();
        if !self.destroyed && self.extend.is_some() {
            // The extend completes: the controller answers, the next relay
            // answers its CREATE2, the client takes its EXTENDED2.
            self.outbound();
            self.settle_and_write();
            self.created();
            self.settle_and_write();
            assert!(self.client_ready(), "{}", ctx("the client got EXTENDED2"));
        }
        if !self.destroyed {
            // More cells after the dust settled: the circuit still works.
            for _ in 0..2 {
                self.up();
                self.down();
            }
            self.settle_and_write();
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
        in_order(&got, self.sent_fwd, self.destroyed, "forward", &ctx);
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
        in_order(&got, self.sent_back, self.destroyed, "backward", &ctx);
        if self.destroyed {
            for w in 0..self.net.cores.len() {
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

/// What the orders of one search did.
#[derive(Default)]
struct Explored {
    /// Orders run.
    runs: u64,
    /// The most moves one order made.
    most_moves: u32,
    /// Moves that found cells waiting in a crossing queue on either side.
    moves_with_crossing: u64,
}

/// Run every distinct order of `events` for each placement of the next
/// relay's connection, on two workers with a built circuit.
fn explore(events: &[Ev]) -> Explored {
    explore_with(events, 2, false)
}

/// [`explore`] on `n` workers (every placement of conn 2), the circuit's
/// extend pending at the start if `extending`.
fn explore_with(events: &[Ev], n: usize, extending: bool) -> Explored {
    let mut x = Explored::default();
    for b in 0..n {
        let mut order = events.to_vec();
        order.sort();
        loop {
            let mut r = if extending {
                Run::extending(n, 1, b)
            } else {
                Run::new(n, 1, b)
            };
            for &e in &order {
                r.event(e);
            }
            x.most_moves = x.most_moves.max(r.moves);
            x.moves_with_crossing += u64::from(r.moves_with_crossing);
            r.finish(&order);
            x.runs += 1;
            if !next_order(&mut order) {
                break;
            }
        }
    }
    x
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
    let x = explore(&[Up, Down, Move1, Move2, Round0, Round1, Round0, Round1]);
    println!(
        "explored {} orders (most moves in one: {}; {} moves with cells waiting to cross)",
        x.runs, x.most_moves, x.moves_with_crossing
    );
    assert_eq!(x.runs, 2 * 10080); // 8! / (2! 2!) orders, two placements
    assert_eq!(x.most_moves, 2, "some orders move both connections");
    assert!(
        x.moves_with_crossing > 1000,
        "moves meet cells waiting in a crossing queue"
    );
}

/// A DESTROY from either end racing a move, cells and rounds.
#[test]
fn every_order_of_a_move_and_a_destroy_leaves_nothing_behind() {
    use Ev::*;
    let mut runs = 0;
    for destroy in [DestroyUp, DestroyDown] {
        for mv in [Move1, Move2] {
            runs += explore(&[Up, Down, mv, destroy, Round0, Round1, Round0]).runs;
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
        let x = explore(&[Up, Down, mv, mv, Round0, Round1, Round0, Round1]);
        assert_eq!(x.most_moves, 2, "some orders move it away and back");
        assert!(x.moves_with_crossing > 0);
        runs += x.runs;
    }
    println!("explored {runs} orders");
    assert_eq!(runs, 2 * 2 * 5040); // 8! / (2! 2! 2!) orders, two placements
}

/// Three workers: a move goes to the next worker, so the peer's worker is
/// often neither the old nor the new one (its markers cross three rings).
/// One move completes in these orders (a second one waits for the first
/// to be reported over, which takes more rounds than the multiset has;
/// the two-worker tests make two).
#[test]
fn every_order_of_a_move_across_three_workers_keeps_every_cell() {
    use Ev::*;
    let x = explore_with(&[Up, Down, Move1, Move2, Round0, Round1, Round2], 3, false);
    println!(
        "explored {} orders (most moves in one: {}; {} moves with cells waiting to cross)",
        x.runs, x.most_moves, x.moves_with_crossing
    );
    assert_eq!(x.runs, 3 * 5040); // 7! orders, three placements
    assert_eq!(x.most_moves, 1);
    assert!(x.moves_with_crossing > 0);
}

/// A pending extend racing moves of both its connections: the
/// controller's answer, the next relay's CREATED2, its first cell and the
/// workers' rounds in every order.
#[test]
fn every_order_of_moves_racing_a_pending_extend_completes_it() {
    use Ev::*;
    let x = explore_with(
        &[Outbound, Created, Down, Move1, Move2, Round0, Round1],
        2,
        true,
    );
    println!(
        "explored {} orders (most moves in one: {})",
        x.runs, x.most_moves
    );
    assert_eq!(x.runs, 2 * 5040); // 7! orders, two placements
    assert_eq!(x.most_moves, 2);
}

/// A pending extend, a move and a DESTROY from the client.
#[test]
fn every_order_of_a_move_and_a_destroy_during_an_extend_leaves_nothing_behind() {
    use Ev::*;
    let mut runs = 0;
    for mv in [Move1, Move2] {
        runs += explore_with(&[Outbound, Created, mv, DestroyUp, Round0, Round1], 2, true).runs;
    }
    println!("explored {runs} orders");
    assert_eq!(runs, 2 * 2 * 720); // 6! orders, two placements
}

/// The sequence numbers one direction delivered: each once, in order,
/// and all `sent` of them unless the circuit was destroyed.
fn in_order(got: &[u32], sent: u32, destroyed: bool, way: &str, ctx: &dyn Fn(&str) -> String) {
    let want: Vec<u32> = (0..got.len() as u32).collect();
    assert_eq!(got, want, "{}", ctx(&format!("{way}: once each, in order")));
    if !destroyed {
        let what = format!("{way}: every cell");
        assert_eq!(got.len() as u32, sent, "{}", ctx(&what));
    }
}
