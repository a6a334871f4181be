package plugin

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tetherjobs/tether/pkg/plugin/pb"
)

func TestErrorClassOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		err  error
		wire pb.ErrorClass
	}{
		{Errorf(Retriable, "r"), pb.ErrorClass_ERROR_CLASS_RETRIABLE},
		{Errorf(Permanent, "p"), pb.ErrorClass_ERROR_CLASS_PERMANENT},
		{Errorf(OutcomeUnknown, "u"), pb.ErrorClass_ERROR_CLASS_OUTCOME_UNKNOWN},
		{errors.New("no class"), pb.ErrorClass_ERROR_CLASS_PERMANENT},
		{Errorf("bogus", "invalid class"), pb.ErrorClass_ERROR_CLASS_PERMANENT},
	} {
		e := errToPB(tc.err)
		assert.Equal(t, tc.wire, e.GetClass(), tc.err.Error())
		assert.Equal(t, tc.err.Error(), e.GetMessage())
		assert.Equal(t, ClassOf(tc.err), ClassOf(errFromPB(e)), "round trip of %q", tc.err)
	}
	assert.Nil(t, errToPB(nil))
	assert.NoError(t, errFromPB(nil))
	for _, c := range []pb.ErrorClass{pb.ErrorClass_ERROR_CLASS_UNSPECIFIED, 99} {
		err := errFromPB(&pb.Error{Class: c, Message: "m"})
		assert.Equal(t, Permanent, ClassOf(err), "wire class %d", c)
		assert.EqualError(t, err, "m")
	}
}
