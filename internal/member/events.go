package member

// Events out: what the member hands the worker in [Event]s (the
// deliveries acquire appends to Member.out, and the emit functions here),
// which Run's loop sends on Events when the executor takes them.

// empty reports whether the event has nothing to report.
func (e *Event) empty() bool {
	return len(e.Deliveries) == 0 && len(e.Renewals) == 0 && len(e.Acked) == 0 && len(e.Lost) == 0
}

// sent records that out was taken from Events and starts the next Event
// on the slices of the one taken before it: its reader has returned to
// Events since, so it is done with that one (the contract of
// [Member.Events]). A job's few hundred bytes of events are then not
// allocated anew, and grown, for every batch.
func (m *Member) sent() {
	next := m.taken
	m.taken = m.out
	clear(next.Deliveries) // their records, for the collector
	clear(next.Renewals)
	clear(next.Acked)
	clear(next.Lost)
	m.out = Event{Deliveries: next.Deliveries[:0], Renewals: next.Renewals[:0], Acked: next.Acked[:0], Lost: next.Lost[:0]}
}

func (m *Member) emitAck(a AckResult) {
	m.out.Acked = append(m.out.Acked, a)
	if a.Err == nil {
		m.acks[a.Type]++
	} else {
		m.st.AckErrors++
	}
}

func (m *Member) emitRenewal(rn Renewal) {
	m.out.Renewals = append(m.out.Renewals, rn)
	m.st.Renewals++
	if rn.Err != nil {
		m.st.RenewErrors++
	}
}

func (m *Member) emitLost(k Key) {
	m.out.Lost = append(m.out.Lost, k)
	m.st.LostRecords++
}
