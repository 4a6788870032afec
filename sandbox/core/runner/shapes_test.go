package runner_test

import (
	"reflect"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/core/runner"
)

// TestFinishedHoldsItsResult: a finished run's result is held by value,
// so no foreground outcome can be without one.
func TestFinishedHoldsItsResult(t *testing.T) {
	f, ok := reflect.TypeOf(runner.Finished{}).FieldByName("Result")
	if !ok || f.Type != reflect.TypeOf(runtime.Result{}) {
		t.Fatalf("Finished.Result is %v, want runtime.Result by value", f.Type)
	}
	var nilable []string
	for _, f := range reflect.VisibleFields(reflect.TypeOf(runner.Finished{})) {
		if f.Type == reflect.TypeOf((*runtime.Result)(nil)) {
			nilable = append(nilable, f.Name)
		}
	}
	if len(nilable) > 0 {
		t.Errorf("Finished can hold a nil run result in %v", nilable)
	}
}

// TestPlanIsImmutable: an approved plan cannot be rewritten from outside
// the engine: it has no exported fields, only read methods.
func TestPlanIsImmutable(t *testing.T) {
	pt := reflect.TypeOf(runner.Plan{})
	for i := 0; i < pt.NumField(); i++ {
		if f := pt.Field(i); f.IsExported() {
			t.Errorf("Plan has the exported field %s", f.Name)
		}
	}
	if pt.NumField() == 0 {
		t.Fatal("Plan has no fields")
	}
}
