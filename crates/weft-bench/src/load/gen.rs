//! The generator side of a load thread: building circuits through the
//! target and sending cells on them, within each circuit's window.

use super::*;

impl LoadThread<'_> {
    pub(super) fn gen_round(&mut self, g: usize, phase: u8) -> bool {
        if self.gens[g].dead {
            return false;
        }
        let mut moved = false;
        if !self.gens[g].open {
            match self.gens[g].link.advance_handshake(SystemTime::now()) {
                Ok(Some(_)) => {
                    self.gens[g].open = true;
                    self.start_circuits(g);
                    moved = true;
                }
                Ok(None) => return false,
                Err(e) => {
                    self.gen_dead(g, format!("generator link: {e}"));
                    return false;
                }
            }
        }
        if phase >= PHASE_RUN && self.cfg.web_circuits > 0 {
            self.start_fetches(g);
        }
        // Read (as fast as allowed).
        let mut budget = READ_BUDGET;
        // The limit applies once data flows: circuits build at full speed.
        let read_rate = self.cfg.read_rate.filter(|_| phase >= PHASE_RUN);
        if let Some(rate) = read_rate {
            let gen = &mut self.gens[g];
            let now = Instant::now();
            let dt = now.duration_since(gen.last_refill).as_secs_f64();
            gen.last_refill = now;
            // Burst: 10 ms worth.
            gen.tokens = (gen.tokens + dt * rate as f64).min(rate as f64 / 100.0 + 65536.0);
            budget = budget.min(gen.tokens.max(0.0) as usize);
        }
        loop {
            if let Err(e) = self.gen_cells(g) {
                self.gen_dead(g, e);
                return true;
            }
            if budget == 0 {
                // Rate-limited or fair share used: come back next round.
                moved = read_rate.is_none();
                break;
            }
            let before = self.gens[g].link.read_total;
            match self.gens[g].link.fill() {
                Ok(IoState::Progress) => {
                    moved = true;
                    let n = (self.gens[g].link.read_total - before) as usize;
                    budget = budget.saturating_sub(n);
                    if read_rate.is_some() {
                        self.gens[g].tokens -= n as f64;
                    }
                }
                Ok(IoState::WouldBlock) => break,
                Ok(IoState::Closed) | Err(_) => {
                    self.gen_dead(g, "generator connection closed by the target".into());
                    return true;
                }
            }
        }
        // Write.
        if phase >= PHASE_RUN && self.cfg.up {
            moved |= self.gen_send(g, phase);
        }
        match self.gens[g].link.flush() {
            Ok(_) => {}
            Err(e) => self.gen_dead(g, format!("generator write: {e}")),
        }
        moved
    }

    pub(super) fn gen_dead(&mut self, g: usize, why: String) {
        self.gens[g].dead = true;
        note(&mut self.report.errors, why.clone());
        let circs = self.gens[g].circs.clone();
        for c in circs {
            self.fail_circ(c, format!("{why} (circuit lost)"));
        }
    }

    pub(super) fn start_circuits(&mut self, g: usize) {
        let hop = match &self.cfg.target {
            Some(h) => h.clone(),
            None => self.sinks[self.gens[g].sink].hop.clone(),
        };
        for i in 0..self.cfg.circuits {
            let circ_id = 0x8000_0000 | ((g as u32) << 16) | (i as u32 + 1);
            let mut origin = OriginCircuit::new();
            let create2 = if self.cfg.cgo && self.cfg.target.is_some() {
                // Congestion control and Relay=6, as a C client asks.
                origin.create2_ntor_v3(&hop, &[2, 1, 0, 3, 2, 2, 6])
            } else {
                origin.create2(&hop)
            };
            let Ok(create2) = create2 else {
                continue;
            };
            let c = self.circs.len();
            if self.cfg.target.is_none() {
                // Direct mode: the sink is the first hop.
                if let Some(x) = create2
                    .get(56..88)
                    .and_then(|x| <[u8; 32]>::try_from(x).ok())
                {
                    self.by_x.insert(x, c);
                }
            }
            self.gens[g]
                .link
                .queue_small(circ_id, cmd::CREATE2, &create2);
            self.gens[g].by_id.insert(circ_id, c);
            self.gens[g].circs.push(c);
            let sink = if self.cfg.spread && self.cfg.target.is_some() {
                (self.gens[g].sink + i) % self.sinks.len()
            } else {
                self.gens[g].sink
            };
            self.circs.push(Circ {
                gen_circ_id: circ_id,
                sink,
                sink_conn: None,
                sink_circ_id: 0,
                state: CircState::Creating,
                origin,
                started: Instant::now(),
                kf: None,
                kb: None,
                up: Flow::default(),
                down: Flow::default(),
                web: i < self.cfg.web_circuits,
                next_fetch: Instant::now() + think(self.cfg.web_think_ms),
                fetch: None,
                down_limit: if i < self.cfg.web_circuits {
                    0
                } else {
                    u64::MAX
                },
            });
        }
    }

    /// Web circuits whose think time is over start a fetch: the sink may
    /// send `web_cells` more cells.
    pub(super) fn start_fetches(&mut self, g: usize) {
        let now = Instant::now();
        for &c in &self.gens[g].circs {
            let circ = &mut self.circs[c];
            if circ.web
                && circ.state == CircState::Ready
                && circ.fetch.is_none()
                && now >= circ.next_fetch
            {
                let end = circ.down.sent.max(circ.down_limit) + self.cfg.web_cells;
                circ.fetch = Some((now, end));
                circ.down_limit = end;
            }
        }
    }

    pub(super) fn circ_ready(&mut self, c: usize) {
        let circ = &mut self.circs[c];
        circ.state = CircState::Ready;
        self.ready += 1;
        self.report
            .build_ms
            .push(circ.started.elapsed().as_secs_f64() * 1e3);
    }

    pub(super) fn gen_cells(&mut self, g: usize) -> Result<(), String> {
        // Data cells on ready circuits are handled in place (the hot path);
        // the rare rest is collected and handled after.
        let mut created: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut relays: Vec<(usize, [u8; BODY_LEN])> = Vec::new();
        let mut destroyed: Vec<(usize, u8)> = Vec::new();
        let now = self.now_ns();
        let measure = self.shared.phase.load(Ordering::Relaxed) == PHASE_MEASURE;
        let (mark_every, t) = (self.cfg.mark_every, self.cfg.transfer_cells);
        let think_ms = self.cfg.web_think_ms;
        let LoadThread {
            gens,
            circs,
            report,
            corrupt,
            down_total,
            ..
        } = self;
        let gen = &mut gens[g];
        let by_id = &gen.by_id;
        gen.link.process_cells(|cell| {
            let CellIn::Fixed {
                circ_id,
                command,
                body,
            } = cell
            else {
                return CellFlow::Continue;
            };
            let Some(&c) = by_id.get(&circ_id) else {
                return CellFlow::Continue;
            };
            match command {
                cmd::RELAY if circs[c].state == CircState::Ready => {
                    let circ = &mut circs[c];
                    let j = circ.down.recv;
                    circ.down.recv += 1;
                    *down_total += 1;
                    // A CGO target: every cell moves the tag chain, the
                    // marked ones are read.
                    circ.origin.first_hop_backward(body, j % mark_every == 0);
                    if j % mark_every == 0 {
                        if let Some(kb) = circ.kb.as_mut() {
                            kb.seek((1 + j) * BODY_LEN as u64);
                            kb.apply_keystream(body);
                        }
                        record_marked(
                            body,
                            j,
                            now,
                            measure,
                            &mut report.delay_down,
                            corrupt,
                            ("down", c),
                        );
                    }
                    if circ.web {
                        if let Some((start, end)) = circ.fetch {
                            if circ.down.recv >= end {
                                if measure {
                                    report.web_ttlb_ms.push(start.elapsed().as_secs_f64() * 1e3);
                                }
                                circ.fetch = None;
                                circ.next_fetch = Instant::now() + think(think_ms);
                            }
                        }
                    } else {
                        if measure {
                            report.bulk_cells_measured += 1;
                        }
                        transfer_progress(&mut circ.down, j, t, measure, report);
                    }
                }
                cmd::RELAY => relays.push((c, *body)),
                cmd::CREATED2 => created.push((c, body[..].to_vec())),
                cmd::DESTROY => destroyed.push((c, body[0])),
                _ => {}
            }
            CellFlow::Continue
        })?;
        for (c, body) in created {
            if let Err(e) = self.circs[c].origin.on_created2(&body) {
                self.fail_circ(c, format!("CREATED2 from target: {e}"));
                continue;
            }
            if self.cfg.target.is_none() {
                self.circ_ready(c);
                continue;
            }
            let sink = &self.sinks[self.circs[c].sink];
            let mut cell = [0u8; BODY_LEN];
            let circ = &mut self.circs[c];
            match circ.origin.extend2(&sink.hop, &mut cell) {
                Ok(create2) => {
                    if let Some(x) = create2
                        .get(56..88)
                        .and_then(|x| <[u8; 32]>::try_from(x).ok())
                    {
                        self.by_x.insert(x, c);
                    }
                    circ.state = CircState::Extending;
                    self.gens[g]
                        .link
                        .queue_cell(circ.gen_circ_id, cmd::RELAY_EARLY, &cell);
                }
                Err(e) => self.fail_circ(c, format!("EXTEND2: {e}")),
            }
        }
        for (c, mut body) in relays {
            let circ = &mut self.circs[c];
            if circ.state != CircState::Extending {
                continue;
            }
            match circ.origin.on_backward(&mut body) {
                Ok((0, h)) if h.command == relay_cmd::EXTENDED2 => {
                    let d = weft_proto::relay::data(&body, &h).to_vec();
                    if let Err(e) = circ.origin.on_extended2(&d) {
                        self.fail_circ(c, format!("EXTENDED2: {e}"));
                        continue;
                    }
                    // tor1: the target's keystreams, sought per marked
                    // cell (a CGO target has none: its layer runs on
                    // the circuit itself).
                    if let Some(km) = circ.origin.key_material(0).copied() {
                        let iv = [0u8; 16];
                        circ.kf = Some(Aes128Ctr::new(km[40..56].into(), &iv.into()));
                        circ.kb = Some(Aes128Ctr::new(km[56..72].into(), &iv.into()));
                    }
                    self.circ_ready(c);
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
            self.fail_circ(
                c,
                format!("target sent DESTROY (reason {reason}) on a generator circuit"),
            );
        }
        Ok(())
    }

    pub(super) fn gen_send(&mut self, g: usize, phase: u8) -> bool {
        let window = self.cfg.window;
        let mark_every = self.cfg.mark_every;
        let t = self.cfg.transfer_cells;
        let n = self.gens[g].circs.len();
        if n == 0 {
            return false;
        }
        let mut sent_any = false;
        let now = Instant::now();
        let stamp = self.now_ns();
        let _ = phase;
        loop {
            let mut progressed = false;
            for _ in 0..n {
                if self.gens[g].link.pending_out() >= WRITE_BATCH {
                    return sent_any;
                }
                let rr = self.gens[g].rr;
                self.gens[g].rr = (rr + 1) % n;
                let c = self.gens[g].circs[rr];
                let circ = &mut self.circs[c];
                // A web circuit only fetches (down): its bulk would make
                // it a bulk circuit upstream.
                if circ.state != CircState::Ready
                    || circ.web
                    || circ.sink_conn.is_none()
                    || !circ.up.can_send(window)
                {
                    continue;
                }
                let k = circ.up.sent;
                circ.up.sent += 1;
                self.up_sent += 1;
                if k.is_multiple_of(t) {
                    circ.up.transfer_start.push((k, now));
                }
                if circ.origin.is_cgo(0) {
                    // CGO chains each cell's tag to the one before: every
                    // cell takes the target's layer.
                    let mut body = self.noise;
                    if k.is_multiple_of(mark_every) {
                        fill_marked(&mut body, k, stamp);
                    }
                    circ.origin.forward_layers(1, cmd::RELAY, &mut body);
                    let id = circ.gen_circ_id;
                    self.gens[g].link.queue_cell(id, cmd::RELAY, &body);
                } else if k.is_multiple_of(mark_every) {
                    let mut body = [0u8; BODY_LEN];
                    fill_marked(&mut body, k, stamp);
                    if let Some(kf) = circ.kf.as_mut() {
                        kf.seek((1 + k) * BODY_LEN as u64);
                        kf.apply_keystream(&mut body);
                    }
                    let id = circ.gen_circ_id;
                    self.gens[g].link.queue_cell(id, cmd::RELAY, &body);
                } else {
                    let id = circ.gen_circ_id;
                    let noise = self.noise;
                    self.gens[g].link.queue_cell(id, cmd::RELAY, &noise);
                }
                progressed = true;
                sent_any = true;
            }
            if !progressed {
                return sent_any;
            }
        }
    }
}
