package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

func TestPassStopsAfterMaxBlockedAndExpires(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := New[int](nil)
	for i := 0; i < 10; i++ {
		q.Push(Item[int]{ID: fmt.Sprint(i), Priority: schemas.PriorityStandard, Payload: i})
	}
	q.Push(Item[int]{ID: "late", Priority: schemas.PriorityStandard, Deadline: now.Add(-time.Second)})
	n := 0
	exp := q.Pass(now, 3, nil, func(Item[int]) Outcome { n++; return Blocked })
	if n != 3 || len(exp) != 1 || exp[0].ID != "late" || q.Len() != 10 {
		t.Fatalf("offered %d, expired %v, left %d", n, exp, q.Len())
	}
}
