package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestEmbeddedMigrations(t *testing.T) {
	t.Parallel()
	ms, err := load(FS)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range ms {
		if m.version != int64(i+1) {
			t.Errorf("migration %s has version %d, want %d: versions are numbered from 1 without gaps", m.name, m.version, i+1)
		}
	}
	if !strings.Contains(ms[0].up, "shareq_processed_jobs") {
		t.Errorf("0001 does not create shareq_processed_jobs:\n%s", ms[0].up)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		fs      fstest.MapFS
		want    []string // names in order
		wantErr string
	}{
		{
			name: "ordered by version, not by name",
			fs: fstest.MapFS{
				"10_b.up.sql": file("b"), "10_b.down.sql": file("-b"),
				"2_a.up.sql": file("a"), "2_a.down.sql": file("-a"),
			},
			want: []string{"2_a", "10_b"},
		},
		{name: "missing down", fs: fstest.MapFS{"0001_a.up.sql": file("a")}, wantErr: "needs both"},
		{name: "missing up", fs: fstest.MapFS{"0001_a.down.sql": file("a")}, wantErr: "needs both"},
		{name: "bad name", fs: fstest.MapFS{"create.sql": file("a")}, wantErr: "name is not"},
		{name: "version 0", fs: fstest.MapFS{"0_a.up.sql": file("a"), "0_a.down.sql": file("a")}, wantErr: "bad version"},
		{
			name:    "two names for a version",
			fs:      fstest.MapFS{"0001_a.up.sql": file("a"), "0001_b.down.sql": file("b")},
			wantErr: "two names",
		},
		{
			name:    "empty file",
			fs:      fstest.MapFS{"0001_a.up.sql": file(""), "0001_a.down.sql": file("b")},
			wantErr: "needs both",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms, err := load(tt.fs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range ms {
				got = append(got, m.name)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("load order = %v, want %v", got, tt.want)
			}
		})
	}
}
