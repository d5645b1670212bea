package jobinfo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/shareq/shareq/enqueue/pgoutbox"
)

// ListFilter selects the jobs [List] returns.
type ListFilter struct {
	// Topic keeps the jobs of one topic ("" for all).
	Topic string
	// DueAfter and DueBefore keep the jobs due at or after, and before,
	// a time (nil for no bound).
	DueAfter, DueBefore *time.Time
	// Scheduled keeps the jobs not due yet; Failing those whose produce
	// failed at least once.
	Scheduled, Failing bool
	// After is the cursor of the page before ([Page.Next]); "" for the
	// first page.
	After string
	// Limit is the page's size, at least 1.
	Limit int
}

// Page is a page of [List].
type Page struct {
	Rows []OutboxRow
	// Next is the cursor of the next page (ListFilter.After), "" when
	// no more jobs match.
	Next string
}

// List returns a page of the jobs waiting in the outbox that f selects,
// in the order the relay produces them: by due time, then by insert.
// Every page is one range scan of the outbox's index on (due_at, id) from
// its cursor, however many jobs wait; with Topic or Failing the scan also
// passes over the rows that do not match until it has a page.
func List(ctx context.Context, db DB, f ListFilter) (Page, error) {
	if f.Limit < 1 {
		return Page{}, fmt.Errorf("jobinfo: list limit %d: want at least 1", f.Limit)
	}
	q, args, err := f.query()
	if err != nil {
		return Page{}, err
	}
	rows, err := queryOutbox(ctx, db, q, false, args...)
	if err != nil {
		return Page{}, TableHint(fmt.Errorf("list the outbox: %w", err))
	}
	p := Page{Rows: rows}
	if len(rows) > f.Limit {
		p.Rows = rows[:f.Limit]
		p.Next = cursorOf(&p.Rows[f.Limit-1])
	}
	return p, nil
}

// query returns the statement of one page and its arguments: one more
// row than the limit, to tell whether another page follows.
func (f ListFilter) query() (string, []any, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Topic != "" {
		where = append(where, "o.topic = "+arg(f.Topic))
	}
	if f.DueAfter != nil {
		where = append(where, "o.due_at >= "+arg(*f.DueAfter))
	}
	if f.DueBefore != nil {
		where = append(where, "o.due_at < "+arg(*f.DueBefore))
	}
	if f.Scheduled {
		where = append(where, "o.due_at > now()")
	}
	if f.Failing {
		where = append(where, "o.attempts > 0")
	}
	if f.After != "" {
		due, row, err := ParseCursor(f.After)
		if err != nil {
			return "", nil, err
		}
		where = append(where, "(o.due_at, o.id) > ("+arg(due)+"::text::timestamptz, "+arg(row)+")")
	}
	q := `SELECT ` + outboxColumns + ` FROM ` + pgoutbox.Table + ` o`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY o.due_at, o.id LIMIT " + arg(f.Limit+1), args, nil
}

// cursorOf is the cursor of the page after r: its due time and row id.
func cursorOf(r *OutboxRow) string {
	due := "-infinity"
	if r.Due.InfinityModifier == pgtype.Finite {
		due = r.Due.Time.UTC().Format(time.RFC3339Nano)
	}
	return due + "/" + strconv.FormatInt(r.ID, 10)
}

// ParseCursor checks a cursor of [Page.Next] ("DUE/ROW") and returns its
// due time ("-infinity" or RFC 3339) and row id.
func ParseCursor(s string) (due string, row int64, err error) {
	due, idText, ok := strings.Cut(s, "/")
	if ok {
		row, err = strconv.ParseInt(idText, 10, 64)
	}
	if due != "-infinity" {
		if _, perr := time.Parse(time.RFC3339Nano, due); perr != nil {
			ok = false
		}
	}
	if !ok || err != nil {
		return "", 0, fmt.Errorf("cursor %q: not a cursor a page gave (DUE/ROW)", s)
	}
	return due, row, nil
}
