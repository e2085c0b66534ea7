package safefile

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// outside is a file a hostile link points to; its bytes must never change.
func outside(t *testing.T) (path string, check func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(path, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		if b, err := os.ReadFile(path); err != nil || string(b) != "precious\n" {
			t.Errorf("the file outside now holds %q (%v)", b, err)
		}
	}
}

// Whatever is planted at the name, OpenFile neither writes through it nor
// blocks on it, and says what is wrong.
func TestOpenFileRefusesWhatIsNotAFileOfItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path, victim string)
		flag  int
		want  string
	}{
		{"symlink, truncating", func(t *testing.T, p, v string) { mustSymlink(t, v, p) }, os.O_CREATE | os.O_RDWR | os.O_TRUNC, "is a symbolic link"},
		{"symlink, appending", func(t *testing.T, p, v string) { mustSymlink(t, v, p) }, os.O_CREATE | os.O_WRONLY | os.O_APPEND, "is a symbolic link"},
		{"dangling symlink", func(t *testing.T, p, v string) { mustSymlink(t, v+".new", p) }, os.O_CREATE | os.O_WRONLY, "is a symbolic link"},
		{"hard link", func(t *testing.T, p, v string) {
			if err := os.Link(v, p); err != nil {
				t.Skip("no hard links here:", err)
			}
		}, os.O_CREATE | os.O_RDWR | os.O_TRUNC, "hard link"},
		{"fifo", func(t *testing.T, p, _ string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, os.O_CREATE | os.O_WRONLY | os.O_APPEND, "not a regular file"},
		{"directory", func(t *testing.T, p, _ string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, os.O_RDONLY, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			victim, check := outside(t)
			// A hard link needs the victim on the same filesystem.
			if tc.name == "hard link" {
				victim = filepath.Join(dir, "victim")
				if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				check = func() {
					if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
						t.Errorf("the other name now holds %q", b)
					}
				}
			}
			p := filepath.Join(dir, "run.log")
			tc.plant(t, p, victim)
			f, err := OpenFile(p, tc.flag, 0o644)
			if err == nil {
				_, _ = f.WriteString("hostile")
				_ = f.Close()
				t.Fatalf("opened %s", tc.name)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not say %q about %s", err, tc.want, p)
			}
			check()
			if _, err := os.Stat(victim + ".new"); err == nil {
				t.Error("a dangling link's target was created")
			}
		})
	}
}

// A plain file is opened, truncated only when asked, and handed out in
// blocking mode (an action writes into it directly).
func TestOpenFileWritesARegularFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run.log")
	if err := os.WriteFile(p, []byte("old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("+more"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if b, _ := os.ReadFile(p); string(b) != "old content+more" {
		t.Errorf("appended: %q", b)
	}
	f, err = OpenFile(p, os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := os.ReadFile(p); len(b) != 0 {
		t.Errorf("not truncated: %q", b)
	}
	fl, err := unixFcntlFlags(f)
	if err != nil || fl&syscall.O_NONBLOCK != 0 {
		t.Errorf("descriptor flags %#x (%v): still non-blocking", fl, err)
	}
}

func unixFcntlFlags(f *os.File) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// WriteFile replaces a link at the path with the file; the link's target
// keeps its bytes.
func TestWriteFileReplacesALink(t *testing.T) {
	victim, check := outside(t)
	p := filepath.Join(t.TempDir(), "answer.json")
	mustSymlink(t, victim, p)
	if err := WriteFile(p, []byte(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
	check()
	if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
		t.Errorf("%s is %v (%v), not a regular file", p, st.Mode(), err)
	}
	if b, _ := os.ReadFile(p); string(b) != `{"approved":true}` {
		t.Errorf("wrote %q", b)
	}
}

// Dir refuses a link as the base or as any directory below it, and makes
// the missing ones.
func TestDirRefusesLinkedDirectories(t *testing.T) {
	for _, linked := range []string{"", ".running", ".running/deeper"} {
		t.Run("link at "+cmp.Or(linked, "base"), func(t *testing.T) {
			root := t.TempDir()
			elsewhere := t.TempDir()
			base := filepath.Join(root, ".loops")
			if linked == "" {
				mustSymlink(t, elsewhere, base)
			} else {
				l := filepath.Join(base, linked)
				if err := os.MkdirAll(filepath.Dir(l), 0o755); err != nil {
					t.Fatal(err)
				}
				mustSymlink(t, elsewhere, l)
			}
			_, err := Dir(base, ".running", "deeper")
			want := filepath.Join(base, linked)
			if !IsLink(err) || !strings.Contains(err.Error(), want+" is a symbolic link") {
				t.Errorf("error %v, want one naming %s", err, want)
			}
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Errorf("made %v in the link's target", ents)
			}
		})
	}
	base := filepath.Join(t.TempDir(), "a", ".loops")
	got, err := Dir(base, ".running")
	if err != nil || got != filepath.Join(base, ".running") {
		t.Fatalf("Dir: %q %v", got, err)
	}
	if st, err := os.Lstat(got); err != nil || !st.IsDir() {
		t.Errorf("not made: %v", err)
	}
}

// An Atomic file whose path is a link refuses its first save: the link
// would otherwise be exchanged into a slot's name and written through.
func TestAtomicRefusesALinkAndLinkedSlots(t *testing.T) {
	victim, check := outside(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "x.state.json")
	mustSymlink(t, victim, p)
	a := NewAtomic(p)
	if err := a.Write([]byte("{}"), nil); !IsLink(err) {
		t.Errorf("save over a link: %v", err)
	}
	_ = a.Close()
	check()

	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	for _, s := range Slots(p) {
		mustSymlink(t, victim, s)
	}
	a = NewAtomic(p)
	defer a.Close()
	if err := a.Write([]byte("{}"), nil); !IsLink(err) {
		t.Errorf("save through a linked slot: %v", err)
	}
	check()
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
