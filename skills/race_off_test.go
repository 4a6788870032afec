//go:build !race

package skills

// raceSlowdown scales CPU-time limits in tests: the race detector makes
// code several times slower.
const raceSlowdown = 1
