//! The sink side of a load thread: the target's connections to our sink
//! relays, answering CREATE2, counting cells and sending them back.

use super::*;

impl LoadThread<'_> {
    pub(super) fn sink_round(&mut self, s: usize, phase: u8) -> bool {
        if self.sink_conns[s].dead {
            return false;
        }
        let mut moved = false;
        if !self.sink_conns[s].open {
            match self.sink_conns[s].link.advance_handshake(SystemTime::now()) {
                Ok(Some(_)) => {
                    self.sink_conns[s].open = true;
                    moved = true;
                }
                Ok(None) => return false,
                Err(e) => {
                    self.sink_dead(s, format!("sink link: {e}"));
                    return false;
                }
            }
        }
        let mut budget = READ_BUDGET;
        loop {
            if let Err(e) = self.sink_cells(s) {
                self.sink_dead(s, e);
                return true;
            }
            if budget == 0 {
                moved = true;
                break;
            }
            let before = self.sink_conns[s].link.read_total;
            match self.sink_conns[s].link.fill() {
                Ok(IoState::Progress) => {
                    moved = true;
                    budget = budget
                        .saturating_sub((self.sink_conns[s].link.read_total - before) as usize);
                }
                Ok(IoState::WouldBlock) => break,
                Ok(IoState::Closed) | Err(_) => {
                    self.sink_dead(s, "sink connection closed by the target".into());
                    return true;
                }
            }
        }
        if phase >= PHASE_RUN && self.cfg.down {
            moved |= self.sink_send(s);
        }
        if let Err(e) = self.sink_conns[s].link.flush() {
            self.sink_dead(s, format!("sink write: {e}"));
        }
        moved
    }

    pub(super) fn sink_dead(&mut self, s: usize, why: String) {
        self.sink_conns[s].dead = true;
        note(&mut self.report.errors, why.clone());
        let circs = self.sink_conns[s].circs.clone();
        for c in circs {
            self.fail_circ(c, format!("{why} (circuit lost)"));
        }
    }

    pub(super) fn sink_cells(&mut self, s: usize) -> Result<(), String> {
        let mut creates: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut destroyed: Vec<usize> = Vec::new();
        let now = self.now_ns();
        let measure = self.shared.phase.load(Ordering::Relaxed) == PHASE_MEASURE;
        let (mark_every, t) = (self.cfg.mark_every, self.cfg.transfer_cells);
        let LoadThread {
            sink_conns,
            circs,
            report,
            corrupt,
            up_total,
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
                        let j = circ.up.recv;
                        circ.up.recv += 1;
                        *up_total += 1;
                        if j % mark_every == 0 {
                            record_marked(
                                body,
                                j,
                                now,
                                measure,
                                &mut report.delay_up,
                                corrupt,
                                ("up", c),
                            );
                        }
                        transfer_progress(&mut circ.up, j, t, measure, report);
                    }
                }
                cmd::CREATE2 => creates.push((circ_id, body[..].to_vec())),
                cmd::DESTROY => {
                    if let Some(&c) = by_id.get(&circ_id) {
                        destroyed.push(c);
                    }
                }
                _ => {}
            }
            CellFlow::Continue
        })?;
        for (circ_id, body) in creates {
            let x: Option<[u8; 32]> = body.get(56..88).and_then(|x| x.try_into().ok());
            let Some(c) = x.and_then(|x| self.by_x.remove(&x)) else {
                note(
                    &mut self.report.errors,
                    format!("sink: CREATE2 for an unknown circuit {circ_id:#x}"),
                );
                self.sink_conns[s]
                    .link
                    .queue_small(circ_id, cmd::DESTROY, &[1]);
                continue;
            };
            let sink = self.sink_conns[s].sink;
            match weft_proto::circuit::answer_create2(
                &self.sinks[sink].ident.handshake,
                &body,
                None,
            ) {
                Ok((reply, _half, _)) => {
                    self.sink_conns[s]
                        .link
                        .queue_small(circ_id, cmd::CREATED2, &reply);
                    self.sink_conns[s].by_id.insert(circ_id, c);
                    self.sink_conns[s].circs.push(c);
                    self.circs[c].sink_conn = Some(s);
                    self.circs[c].sink_circ_id = circ_id;
                }
                Err(e) => self.fail_circ(c, format!("sink CREATE2: {e}")),
            }
        }
        for c in destroyed {
            self.fail_circ(c, "target sent DESTROY on a sink circuit".into());
        }
        Ok(())
    }

    pub(super) fn sink_send(&mut self, s: usize) -> bool {
        let window = self.cfg.window;
        let mark_every = self.cfg.mark_every;
        let t = self.cfg.transfer_cells;
        let n = self.sink_conns[s].circs.len();
        if n == 0 {
            return false;
        }
        let now = Instant::now();
        let stamp = self.now_ns();
        let mut sent_any = false;
        loop {
            let mut progressed = false;
            for _ in 0..n {
                if self.sink_conns[s].link.pending_out() >= WRITE_BATCH {
                    return sent_any;
                }
                let rr = self.sink_conns[s].rr;
                self.sink_conns[s].rr = (rr + 1) % n;
                let c = self.sink_conns[s].circs[rr];
                let circ = &mut self.circs[c];
                if circ.state != CircState::Ready
                    || !circ.down.can_send(window)
                    || circ.down.sent >= circ.down_limit
                {
                    continue;
                }
                let k = circ.down.sent;
                circ.down.sent += 1;
                self.down_sent += 1;
                if k.is_multiple_of(t) {
                    circ.down.transfer_start.push((k, now));
                }
                let id = circ.sink_circ_id;
                if k.is_multiple_of(mark_every) {
                    let mut body = [0u8; BODY_LEN];
                    fill_marked(&mut body, k, stamp);
                    self.sink_conns[s].link.queue_cell(id, cmd::RELAY, &body);
                } else {
                    let noise = self.noise;
                    self.sink_conns[s].link.queue_cell(id, cmd::RELAY, &noise);
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
