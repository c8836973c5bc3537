//! The migration's state machines (part of the sans-IO circuit core), one
//! per circuit half and one per forwarder, with their transitions as
//! methods: the protocol of [`super::migrate`] decides *when* each input
//! comes; these types say what it does to the half or the old slot, and
//! refuse the states that must not exist (a forwarder that announces the
//! end of its stream before it knows where the half went).
//!
//! A half ([`MoveState`]) takes part in a move — its own connection's
//! (it was adopted) or its peer's (`PeerMoved`) — by holding the cells
//! that do not come from the old worker until that worker's `SourceDone`
//! marker; the marker may overtake the news it belongs to (they travel on
//! different rings), a relabel half may move before its `Linked` reached
//! the keyed half, and a half that still holds owes its old peer
//! `Switched` until the hold ends.
//!
//! An old half slot ([`ForwarderPhase`]) buffers what arrives for the old
//! reference until the new worker says where the half is (`Installed`),
//! passes everything on from then, and sends `SourceDone` once the peer
//! said it `Switched` — in whichever order those two come.

use crate::messages::HalfRef;

/// A worker index or none, in two bytes (a half's slot must stay small:
/// `Option<u16>` takes four).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MaybeWorker(u16);

impl MaybeWorker {
    const NONE: MaybeWorker = MaybeWorker(u16::MAX);

    fn some(w: u16) -> MaybeWorker {
        debug_assert_ne!(w, u16::MAX, "u16::MAX is no worker");
        MaybeWorker(w)
    }

    fn get(self) -> Option<u16> {
        (self != MaybeWorker::NONE).then_some(self.0)
    }

    fn is(self, w: u16) -> bool {
        self != MaybeWorker::NONE && self.0 == w
    }

    fn take(&mut self) -> Option<u16> {
        std::mem::replace(self, MaybeWorker::NONE).get()
    }
}

/// A half's part in a move (see the module docs). `Default`: in none.
/// Kept to 20 bytes (`half.rs` asserts a half's slot size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MoveState {
    /// Cells from any worker but this one wait until its `SourceDone`.
    hold: MaybeWorker,
    /// This worker's `SourceDone` came before the news it belongs to.
    early_done: MaybeWorker,
    /// The peer moved before its `Linked` (coming from this worker, naming
    /// the old reference) reached us.
    link_from: MaybeWorker,
    /// `Switched` for this old reference goes out when the hold ends
    /// (`worker` is `u16::MAX` when none is owed).
    switch_owed: HalfRef,
}

/// No `Switched` owed.
const NO_REF: HalfRef = HalfRef {
    worker: u16::MAX,
    slot: u32::MAX,
    gen: u32::MAX,
};

impl Default for MoveState {
    fn default() -> Self {
        MoveState {
            hold: MaybeWorker::NONE,
            early_done: MaybeWorker::NONE,
            link_from: MaybeWorker::NONE,
            switch_owed: NO_REF,
        }
    }
}

/// What the half does when a `SourceDone` comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnSourceDone {
    /// The marker it waited for: release the held cells, in arrival order.
    Release,
    /// Not (yet) the one it waits for: remembered for the news to come.
    Early,
}

impl MoveState {
    /// The half itself arrived from worker `from` (its connection moved):
    /// cells not forwarded by `from` are newer than what `from` still has
    /// in flight, and wait for its marker.
    pub(crate) fn adopted_from(from: u16) -> MoveState {
        MoveState {
            hold: MaybeWorker::some(from),
            ..MoveState::default()
        }
    }

    /// True while the half takes part in a move (with `held` cells
    /// waiting): it may not move itself, since it keeps one marker to wait
    /// for.
    pub(crate) fn in_move(&self, held: bool) -> bool {
        held || *self != MoveState::default()
    }

    /// True while it waits for an old worker's marker (the tests).
    #[cfg(test)]
    pub(crate) fn holding(&self) -> bool {
        self.hold.get().is_some()
    }

    /// A cell from worker `source`: true if it must be held (it is newer
    /// than what the old worker still has in flight).
    pub(crate) fn holds(&self, source: u16) -> bool {
        self.hold.get().is_some_and(|f| f != source)
    }

    /// Our peer moved away from worker `old` (`PeerMoved`): hold for
    /// `old`'s marker, unless it came first.
    pub(crate) fn peer_moved(&mut self, old: u16) {
        if self.early_done.is(old) {
            self.early_done = MaybeWorker::NONE;
        } else {
            self.hold = MaybeWorker::some(old);
        }
    }

    /// The peer moved before its `Linked` reached us: it comes from
    /// `old`, naming the old reference.
    pub(crate) fn expect_link_from(&mut self, old: u16) {
        self.link_from = MaybeWorker::some(old);
    }

    /// True if a `Linked` from worker `from` is the one announced by
    /// [`MoveState::expect_link_from`].
    pub(crate) fn expects_link_from(&self, from: u16) -> bool {
        self.link_from.is(from)
    }

    /// A `Linked` from worker `from`: true if it is the one announced by
    /// [`MoveState::expect_link_from`] (the old reference it names then
    /// hears `Switched`).
    pub(crate) fn link_came(&mut self, from: u16) -> bool {
        if self.link_from.is(from) {
            self.link_from = MaybeWorker::NONE;
            true
        } else {
            false
        }
    }

    /// Worker `source`'s `SourceDone`.
    pub(crate) fn source_done(&mut self, source: u16) -> OnSourceDone {
        if !self.hold.is(source) {
            self.early_done = MaybeWorker::some(source);
            return OnSourceDone::Early;
        }
        self.hold.take();
        OnSourceDone::Release
    }

    /// We address the peer's new reference and send nothing more to
    /// `old`: `Switched` for it now (returned), or when the hold ends.
    pub(crate) fn switched_from(&mut self, old: HalfRef) -> Option<HalfRef> {
        if self.hold.get().is_some() {
            self.switch_owed = old;
            None
        } else {
            Some(old)
        }
    }

    /// The held cells are all released: the `Switched` owed, if any.
    pub(crate) fn hold_ended(&mut self) -> Option<HalfRef> {
        let owed = std::mem::replace(&mut self.switch_owed, NO_REF);
        (owed.worker != u16::MAX).then_some(owed)
    }
}

/// Where an old half slot is in its move (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForwarderPhase {
    /// The half left; where it went is not known yet: buffer.
    Detached {
        /// The peer's `Switched` came already.
        switched: bool,
    },
    /// The new worker installed the half at `new`: pass on; the peer has
    /// not switched yet.
    Installed {
        /// The half's new reference.
        new: HalfRef,
    },
    /// Installed and switched: `SourceDone` is due at the next flush.
    Due {
        /// The half's new reference.
        new: HalfRef,
    },
    /// `SourceDone` went to `new`: late messages (a DESTROY, an extend's
    /// answer) still pass on until the slot is dropped.
    Done {
        /// The half's new reference.
        new: HalfRef,
    },
}

impl ForwarderPhase {
    /// Where the half went, once known.
    pub(crate) fn new_ref(&self) -> Option<HalfRef> {
        match *self {
            ForwarderPhase::Detached { .. } => None,
            ForwarderPhase::Installed { new }
            | ForwarderPhase::Due { new }
            | ForwarderPhase::Done { new } => Some(new),
        }
    }

    /// `Installed{new}` came (a repeat changes nothing).
    pub(crate) fn installed(&mut self, new: HalfRef) {
        if let ForwarderPhase::Detached { switched } = *self {
            *self = if switched {
                ForwarderPhase::Due { new }
            } else {
                ForwarderPhase::Installed { new }
            };
        }
    }

    /// The peer's worker said it switched to the new reference.
    pub(crate) fn switched(&mut self) {
        *self = match *self {
            ForwarderPhase::Detached { .. } => ForwarderPhase::Detached { switched: true },
            ForwarderPhase::Installed { new } => ForwarderPhase::Due { new },
            other => other,
        };
    }

    /// True if `SourceDone` is due now (it is then counted as sent).
    pub(crate) fn take_marker(&mut self) -> bool {
        match *self {
            ForwarderPhase::Due { new } => {
                *self = ForwarderPhase::Done { new };
                true
            }
            _ => false,
        }
    }

    /// True once `SourceDone` went out.
    pub(crate) fn done(&self) -> bool {
        matches!(self, ForwarderPhase::Done { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(worker: u16) -> HalfRef {
        HalfRef {
            worker,
            slot: 7,
            gen: 1,
        }
    }

    #[test]
    fn a_half_holds_for_its_old_worker_and_releases_on_its_marker() {
        let mut m = MoveState::adopted_from(2);
        assert!(m.in_move(false));
        assert!(m.holds(1), "newer than what worker 2 has in flight");
        assert!(!m.holds(2));
        assert_eq!(m.source_done(1), OnSourceDone::Early, "not its marker");
        assert_eq!(m.source_done(2), OnSourceDone::Release);
        assert!(!m.holds(1));
    }

    #[test]
    fn a_marker_before_its_news_ends_the_hold_before_it_starts() {
        let mut m = MoveState::default();
        assert_eq!(m.source_done(3), OnSourceDone::Early);
        assert!(m.in_move(false), "it heard a marker: it may not move");
        m.peer_moved(3);
        assert!(!m.holds(0), "nothing to hold: the marker came first");
        assert_eq!(m, MoveState::default());
    }

    #[test]
    fn switched_waits_for_the_end_of_the_hold() {
        let mut m = MoveState::adopted_from(1);
        assert_eq!(m.switched_from(r(0)), None, "owed while holding");
        assert_eq!(m.source_done(1), OnSourceDone::Release);
        assert_eq!(m.hold_ended(), Some(r(0)));
        assert_eq!(m.hold_ended(), None, "once");
        assert!(!m.in_move(false));
        let mut idle = MoveState::default();
        assert_eq!(idle.switched_from(r(0)), Some(r(0)), "at once");
    }

    #[test]
    fn a_link_announced_by_a_move_is_recognised_once() {
        let mut m = MoveState::default();
        m.peer_moved(1);
        m.expect_link_from(1);
        assert!(!m.link_came(0));
        assert!(m.link_came(1));
        assert!(!m.link_came(1));
        assert_eq!(m.source_done(1), OnSourceDone::Release);
        assert!(!m.in_move(false));
        assert!(m.in_move(true), "cells still held");
    }

    #[test]
    fn a_forwarder_announces_done_only_installed_and_switched_in_either_order() {
        for switched_first in [false, true] {
            let mut f = ForwarderPhase::Detached { switched: false };
            assert_eq!(f.new_ref(), None);
            if switched_first {
                f.switched();
                assert!(!f.take_marker(), "not before it knows where the half went");
                f.installed(r(1));
            } else {
                f.installed(r(1));
                assert!(!f.take_marker(), "not before the peer switched");
                f.switched();
            }
            assert!(!f.done());
            assert!(f.take_marker());
            assert!(!f.take_marker(), "once");
            assert!(f.done());
            assert_eq!(f.new_ref(), Some(r(1)));
            f.installed(r(2));
            f.switched();
            assert_eq!(
                f,
                ForwarderPhase::Done { new: r(1) },
                "repeats change nothing"
            );
        }
    }
}
