package claim

import "testing"

func TestFreeSlots(t *testing.T) {
	for _, c := range []struct {
		name                   string
		capacity, held, ending int
		want                   int
	}{
		{"idle", 4, 0, 0, 4},
		{"all running", 4, 4, 0, 0},
		{"some running", 4, 3, 0, 1},
		{"ends waiting free their slots", 4, 4, 3, 3},
		{"every slot free, ends waiting", 4, 4, 4, 4},
		{"at most another capacity of ends held", 4, 7, 4, 1},
		{"bound reached", 4, 8, 6, 0},
		{"bound reached, all ending", 4, 8, 8, 0},
		{"never negative", 2, 5, 0, 0},
	} {
		if got := freeSlots(c.capacity, c.held, c.ending); got != c.want {
			t.Errorf("%s: freeSlots(%d, %d, %d) = %d, want %d", c.name, c.capacity, c.held, c.ending, got, c.want)
		}
	}
}
