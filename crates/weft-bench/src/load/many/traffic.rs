//! The traffic of a scale load thread: building circuits (CREATE2, the
//! filler EXTEND2, the sink's filler CREATED2), the cells that arrive on
//! generator and sink connections, idle circuits' cells and the bulk
//! circuits' windows.

use super::*;

/// The order in which a thread builds its circuits: round r takes circuit
/// r of every connection that has one, so every connection gets its first
/// circuits early. `counts[g]` circuits of connection g occupy indices
/// `base[g]..base[g] + counts[g]`.
pub(crate) fn build_order(counts: &[usize]) -> Vec<u32> {
    let mut base = Vec::with_capacity(counts.len());
    let mut b = 0usize;
    for &c in counts {
        base.push(b);
        b += c;
    }
    let rounds = counts.iter().copied().max().unwrap_or(0);
    let mut order = Vec::with_capacity(b);
    for r in 0..rounds {
        for (g, &c) in counts.iter().enumerate() {
            if r < c {
                order.push((base[g] + r) as u32);
            }
        }
    }
    order
}

impl Many<'_> {
    /// The cells a generator connection received: bulk cells in place,
    /// the rare rest (CREATED2, EXTENDED2, DESTROY) after.
    pub(super) fn gen_cells(&mut self, g: usize, phase: u8) -> Result<(), String> {
        let mut created: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut relays: Vec<(usize, [u8; BODY_LEN])> = Vec::new();
        let mut destroyed: Vec<(usize, u8)> = Vec::new();
        let now = self.now_ns();
        let measure = phase == MANY_MEASURE;
        let mark_every = self.cfg.mark_every;
        let Many {
            gens,
            circs,
            n,
            delay_down,
            ..
        } = self;
        let gen = &mut gens[g];
        let (base, count) = (gen.base, gen.count);
        gen.link.process_cells(|cell| {
            let CellIn::Fixed {
                circ_id,
                command,
                body,
            } = cell
            else {
                return CellFlow::Continue;
            };
            let k = (circ_id & 0x7fff_ffff) as usize;
            if circ_id & 0x8000_0000 == 0 || k == 0 || k > count {
                return CellFlow::Continue;
            }
            let c = base + k - 1;
            match command {
                cmd::RELAY if circs[c].state == St::Ready => {
                    let circ = &mut circs[c];
                    if let Some(keys) = circ.keys.as_mut() {
                        let j = circ.down.recv;
                        circ.down.recv += 1;
                        n.down_cells += 1;
                        if j % mark_every == 0 {
                            keys.kb.seek((1 + j) * BODY_LEN as u64);
                            keys.kb.apply_keystream(body);
                            record_marked(
                                body,
                                j,
                                now,
                                measure,
                                delay_down,
                                &mut n.corrupt,
                                ("down", c),
                            );
                        }
                    }
                }
                cmd::RELAY | cmd::RELAY_EARLY => relays.push((c, *body)),
                cmd::CREATED2 => created.push((c, body[..].to_vec())),
                cmd::DESTROY => destroyed.push((c, body[0])),
                _ => {}
            }
            CellFlow::Continue
        })?;
        for (c, body) in created {
            self.extend(g, c, &body);
        }
        for (c, mut body) in relays {
            let circ = &mut self.circs[c];
            if circ.state != St::Extending {
                continue;
            }
            let Some(origin) = circ.origin.as_mut() else {
                continue;
            };
            match origin.on_backward(&mut body) {
                Ok((0, h)) if h.command == relay_cmd::EXTENDED2 => {
                    if circ.bulk {
                        let km = origin.key_material(0).copied().unwrap_or([0; 72]);
                        let iv = [0u8; 16];
                        circ.keys = Some(Box::new(BulkKeys {
                            kf: Aes128Ctr::new(km[40..56].into(), &iv.into()),
                            kb: Aes128Ctr::new(km[56..72].into(), &iv.into()),
                        }));
                    }
                    circ.origin = None;
                    circ.state = St::Ready;
                    self.in_flight = self.in_flight.saturating_sub(1);
                    self.n.built += 1;
                }
                Ok((hop, h)) => {
                    let why = format!(
                        "unexpected relay command {} from hop {hop} while extending",
                        h.command
                    );
                    self.fail_circ(c, why);
                }
                Err(e) => self.fail_circ(c, format!("while extending: {e}")),
            }
        }
        for (c, reason) in destroyed {
            let st = self.circs[c].state;
            self.fail_circ(
                c,
                format!("target sent DESTROY (reason {reason}) on a generator circuit ({st:?})"),
            );
        }
        Ok(())
    }

    /// CREATED2 from the target: finish the first hop, then EXTEND2 to the
    /// circuit's sink with a filler handshake (the target only passes it
    /// on; the sink finds the circuit by its X).
    fn extend(&mut self, g: usize, c: usize, created2: &[u8]) {
        let circ = &mut self.circs[c];
        if circ.state != St::Creating {
            return;
        }
        let finished = match circ.origin.as_mut() {
            Some(origin) => origin.on_created2(created2),
            None => return,
        };
        if let Err(e) = finished {
            self.fail_circ(c, format!("CREATED2 from the target: {e}"));
            return;
        }
        let circ = &mut self.circs[c];
        let Some(origin) = circ.origin.as_mut() else {
            return;
        };
        let hop = &self.sinks[usize::from(circ.sink)].hop;
        let x: [u8; 32] = weft_crypto::random_array();
        // HTYPE 2 (ntor) | HLEN 84 | node ID | KEYID(B) | X.
        let mut hs = Vec::with_capacity(88);
        hs.extend_from_slice(&2u16.to_be_bytes());
        hs.extend_from_slice(&84u16.to_be_bytes());
        hs.extend_from_slice(&hop.rsa_id);
        hs.extend_from_slice(&hop.ntor_key);
        hs.extend_from_slice(&x);
        let (ipv4, ipv6) = hop.link_addrs();
        let data = encode_extend2(&Extend2 {
            ipv4,
            ipv6,
            rsa_id: hop.rsa_id,
            ed_id: hop.ed_id,
            create2: hs,
        });
        let mut cell = [0u8; BODY_LEN];
        origin.send(0, relay_cmd::EXTEND2, 0, &data, &mut cell);
        circ.state = St::Extending;
        let id = circ.gen_circ_id;
        self.by_x.insert(x, c);
        self.gens[g].link.queue_cell(id, cmd::RELAY_EARLY, &cell);
        self.mark_dirty(Conn::Gen(g));
    }

    /// The cells a sink connection received: bulk cells counted and their
    /// stamps checked, idle cells counted, CREATE2 answered.
    pub(super) fn sink_cells(&mut self, s: usize, phase: u8) -> Result<(), String> {
        let mut creates: Vec<(u32, Option<[u8; 32]>)> = Vec::new();
        let mut destroyed: Vec<usize> = Vec::new();
        let now = self.now_ns();
        let measure = phase == MANY_MEASURE;
        let mark_every = self.cfg.mark_every;
        let Many {
            sink_conns,
            circs,
            n,
            delay_up,
            ..
        } = self;
        let sc = &mut sink_conns[s];
        let by_id = &sc.by_id;
        sc.link.process_cells(|cell| {
            let CellIn::Fixed {
                circ_id,
                command,
                body,
            } = cell
            else {
                return CellFlow::Continue;
            };
            match command {
                cmd::RELAY | cmd::RELAY_EARLY => {
                    if let Some(&c) = by_id.get(&circ_id) {
                        let circ = &mut circs[c];
                        if circ.bulk {
                            let j = circ.up.recv;
                            circ.up.recv += 1;
                            n.up_cells += 1;
                            if j % mark_every == 0 {
                                record_marked(
                                    body,
                                    j,
                                    now,
                                    measure,
                                    delay_up,
                                    &mut n.corrupt,
                                    ("up", c),
                                );
                            }
                        } else {
                            n.pings_received += 1;
                        }
                    }
                }
                cmd::CREATE2 => {
                    creates.push((circ_id, body.get(56..88).and_then(|x| x.try_into().ok())))
                }
                cmd::DESTROY => {
                    if let Some(&c) = by_id.get(&circ_id) {
                        destroyed.push(c);
                    }
                }
                _ => {}
            }
            CellFlow::Continue
        })?;
        for (circ_id, x) in creates {
            let Some(c) = x.and_then(|x| self.by_x.remove(&x)) else {
                note(
                    &mut self.errors,
                    format!("sink: CREATE2 for an unknown circuit {circ_id:#x}"),
                );
                self.sink_conns[s]
                    .link
                    .queue_small(circ_id, cmd::DESTROY, &[1]);
                continue;
            };
            // HLEN 64 | Y | AUTH: filler, the target passes it on unread.
            let mut reply = [0u8; 66];
            reply[..2].copy_from_slice(&64u16.to_be_bytes());
            weft_crypto::random_bytes(&mut reply[2..]);
            let sc = &mut self.sink_conns[s];
            sc.link.queue_small(circ_id, cmd::CREATED2, &reply);
            sc.by_id.insert(circ_id, c);
            sc.circs.push(c);
            self.circs[c].sink_conn = s as u32;
            self.circs[c].sink_circ_id = circ_id;
        }
        for c in destroyed {
            let st = self.circs[c].state;
            self.fail_circ(c, format!("target sent DESTROY on a sink circuit ({st:?})"));
        }
        Ok(())
    }

    /// Start circuit builds until `in_flight` are under way, for the
    /// circuits before `limit` in the build order.
    pub(super) fn issue_creates(&mut self, limit: usize) -> bool {
        let mut moved = false;
        let limit = limit.min(self.order.len());
        while self.in_flight < self.cfg.in_flight && self.next_issue < limit {
            let c = self.order[self.next_issue] as usize;
            self.next_issue += 1;
            if self.circs[c].state != St::Queued {
                continue;
            }
            let g = self.circs[c].gen as usize;
            if g >= self.gens.len() || !self.gens[g].open || self.gens[g].dead {
                self.fail_circ(c, "its generator connection is not open".into());
                continue;
            }
            let mut origin = Box::new(OriginCircuit::new());
            let body = match origin.create2(&self.cfg.target) {
                Ok(b) => b,
                Err(e) => {
                    self.fail_circ(c, format!("CREATE2: {e}"));
                    continue;
                }
            };
            let circ = &mut self.circs[c];
            circ.origin = Some(origin);
            circ.state = St::Creating;
            let id = circ.gen_circ_id;
            self.in_flight += 1;
            self.gens[g].link.queue_small(id, cmd::CREATE2, &body);
            self.mark_dirty(Conn::Gen(g));
            moved = true;
        }
        moved
    }

    /// Send the idle cells that are due: each circuit one per
    /// `ping_period`, the circuits taken in turn so the cells are spread
    /// evenly over the period. (Bulk and unbuilt circuits skip their turn.)
    pub(super) fn pings(&mut self) -> bool {
        let total = self.circs.len();
        if total == 0 {
            return false;
        }
        let start = *self.ping_start.get_or_insert_with(Instant::now);
        let per_s = total as f64 / self.cfg.ping_period.as_secs_f64().max(1e-3);
        let due_total = (start.elapsed().as_secs_f64() * per_s) as u64;
        let due = due_total
            .saturating_sub(self.pings_issued)
            .min(MAX_PINGS_PER_ROUND);
        let mut sent = false;
        for _ in 0..due {
            self.pings_issued += 1;
            let c = self.ping_cursor;
            self.ping_cursor = (c + 1) % total;
            let circ = &self.circs[c];
            if circ.state != St::Ready || circ.bulk {
                continue;
            }
            let (g, id) = (circ.gen as usize, circ.gen_circ_id);
            if self.gens[g].dead {
                continue;
            }
            let noise = self.noise;
            self.gens[g].link.queue_cell(id, cmd::RELAY, &noise);
            self.mark_dirty(Conn::Gen(g));
            self.n.pings_sent += 1;
            sent = true;
        }
        // Behind by more than a round's worth (a stall): skip ahead rather
        // than burst.
        if due_total > self.pings_issued + MAX_PINGS_PER_ROUND {
            self.pings_issued = due_total;
        }
        sent
    }

    /// Fill the bulk circuits' windows, both ways, in bursts of
    /// [`BULK_BURST`] cells per circuit and direction.
    /// Each bulk circuit's cells received so far (up at its sink, down at
    /// its generator).
    pub(super) fn bulk_received(&self) -> Vec<(u64, u64)> {
        self.bulk
            .iter()
            .map(|&c| (self.circs[c].up.recv, self.circs[c].down.recv))
            .collect()
    }

    pub(super) fn bulk_send(&mut self) -> bool {
        let window = self.cfg.window;
        let mark_every = self.cfg.mark_every;
        let stamp = self.now_ns();
        let noise = self.noise;
        let mut moved = false;
        // The circuit that goes first moves on every round, so that when a
        // write buffer fills, the same circuits do not always find it full.
        let n = self.bulk.len();
        let first = self.bulk_rr;
        self.bulk_rr = (first + 1) % n.max(1);
        // A sink's link carries several bulk circuits, each with its own
        // window, as a relay's link does: it may queue a write batch for
        // each (with one batch per link, the load itself capped the down
        // direction of a link with many circuits once the target was fast).
        let sink_batch: Vec<usize> = self
            .sink_conns
            .iter()
            .map(|sc| {
                let bulk = sc.circs.iter().filter(|&&c| self.circs[c].bulk).count();
                WRITE_BATCH * bulk.max(1)
            })
            .collect();
        // Bounded: each pass either queues a cell or ends the loop, and
        // write buffers cap what one round queues.
        for _ in 0..256 {
            let mut progressed = false;
            for i in 0..n {
                let c = self.bulk[(first + i) % n];
                let circ = &mut self.circs[c];
                if circ.state != St::Ready || circ.sink_conn == NO_CONN {
                    continue;
                }
                let g = circ.gen as usize;
                let s = circ.sink_conn as usize;
                let (gen_id, sink_id) = (circ.gen_circ_id, circ.sink_circ_id);
                let Some(keys) = circ.keys.as_mut() else {
                    continue;
                };
                let mut up = 0;
                let gen = &mut self.gens[g];
                while up < BULK_BURST
                    && !gen.dead
                    && circ.up.sent - circ.up.recv < window
                    && gen.link.pending_out() < WRITE_BATCH
                {
                    let k = circ.up.sent;
                    circ.up.sent += 1;
                    if k.is_multiple_of(mark_every) {
                        let mut body = [0u8; BODY_LEN];
                        fill_marked(&mut body, k, stamp);
                        keys.kf.seek((1 + k) * BODY_LEN as u64);
                        keys.kf.apply_keystream(&mut body);
                        gen.link.queue_cell(gen_id, cmd::RELAY, &body);
                    } else {
                        gen.link.queue_cell(gen_id, cmd::RELAY, &noise);
                    }
                    up += 1;
                }
                let mut down = 0;
                let sc = &mut self.sink_conns[s];
                while down < BULK_BURST
                    && !sc.dead
                    && circ.down.sent - circ.down.recv < window
                    && sc.link.pending_out() < sink_batch[s]
                {
                    let k = circ.down.sent;
                    circ.down.sent += 1;
                    if k.is_multiple_of(mark_every) {
                        let mut body = [0u8; BODY_LEN];
                        fill_marked(&mut body, k, stamp);
                        sc.link.queue_cell(sink_id, cmd::RELAY, &body);
                    } else {
                        sc.link.queue_cell(sink_id, cmd::RELAY, &noise);
                    }
                    down += 1;
                }
                if up > 0 {
                    self.mark_dirty(Conn::Gen(g));
                }
                if down > 0 {
                    self.mark_dirty(Conn::Sink(s));
                }
                progressed |= up + down > 0;
            }
            if !progressed {
                break;
            }
            moved = true;
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_order_interleaves_connections() {
        // Connection 0 has 3 circuits (0..3), 1 has 1 (3), 2 has 2 (4..6).
        assert_eq!(build_order(&[3, 1, 2]), vec![0, 3, 4, 1, 5, 2]);
        assert!(build_order(&[]).is_empty());
        let o = build_order(&[5, 0, 7]);
        let mut s = o.clone();
        s.sort_unstable();
        assert_eq!(s, (0..12).collect::<Vec<u32>>());
    }
}
