package sparkeks

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestParseTemplateErrors names each part of a template that is checked,
// with the first problem found when several are wrong.
func TestParseTemplateErrors(t *testing.T) {
	for _, tc := range []struct{ template, want string }{
		{`{"apiVersion":"v1","kind":"Pod","spec":[]}`, `template: apiVersion must be "sparkoperator.k8s.io/v1beta2" (or left out), got v1`},
		{`{"kind":"Pod"}`, `template: kind must be "SparkApplication" (or left out), got Pod`},
		{`{"metadata":null}`, `template: metadata must be a mapping`},
		{`{"spec":"x"}`, `template: spec must be a mapping`},
		{`{"spec":{"driver":[],"volumes":{}}}`, `template: spec.driver must be a mapping`},
		{`{"spec":{"executor":1}}`, `template: spec.executor must be a mapping`},
		{`{"spec":{"sparkConf":[]}}`, `template: spec.sparkConf must be a mapping`},
		{`{"spec":{"hadoopConf":"a"}}`, `template: spec.hadoopConf must be a mapping`},
		{`{"spec":{"volumes":{},"arguments":{}}}`, `template: spec.volumes must be a list`},
		{`{"spec":{"arguments":"--x","driver":{"volumeMounts":{}}}}`, `template: spec.arguments must be a list`},
		{`{"spec":{"driver":{"volumeMounts":{},"template":[]}}}`, `template: spec.driver.volumeMounts must be a list`},
		{`{"spec":{"driver":{"template":[]}}}`, `template: spec.driver.template must be a mapping (a pod template)`},
		{`{"spec":{"driver":{"template":{"spec":[]}}}}`, `template: spec.driver.template.spec must be a mapping`},
		{`{"spec":{"driver":{"template":{"spec":{"volumes":{}}}}}}`, `template: spec.driver.template.spec.volumes must be a list`},
		{`{"spec":{"driver":{"template":{"spec":{"volumes":[{},"x"],"containers":1}}}}}`, `template: spec.driver.template.spec.volumes[1] must be a mapping`},
		{`{"spec":{"driver":{"template":{"spec":{"containers":{}}}}}}`, `template: spec.driver.template.spec.containers must be a list`},
		{`{"spec":{"driver":{"template":{"spec":{"containers":[null]}}}}}`, `template: spec.driver.template.spec.containers[0] must be a mapping`},
		{`{"spec":{"mode":"client","driver":{"template":{"spec":{"containers":[{},{"volumeMounts":{}}]}}}}}`, `template: spec.driver.template.spec.containers[1].volumeMounts must be a list`},
		{`{"spec":{"mode":1,"restartPolicy":"Never"}}`, `template.spec.mode: must be "cluster", got ""`},
		{`{"spec":{"restartPolicy":"Never","arguments":[1]}}`, `template: spec.restartPolicy must be a mapping`},
		{`{"spec":{"restartPolicy":{"type":null},"arguments":[1]}}`, `template.spec.restartPolicy.type: must be "Never" (or left out), got <nil>`},
		{`{"spec":{"arguments":["a",1,2]}}`, `template: spec.arguments[1] must be a string`},
	} {
		_, err := parseTemplate(json.RawMessage(tc.template))
		if assert.Error(t, err, tc.template) {
			assert.Contains(t, err.Error(), tc.want, tc.template)
		}
	}
	_, err := parseTemplate(json.RawMessage(`{"apiVersion":"sparkoperator.k8s.io/v1beta2","kind":"SparkApplication","spec":{"mode":"cluster","restartPolicy":{"type":"Never"},"arguments":["a"],"driver":{"template":{"spec":{"containers":[{"volumeMounts":[]}]}}}}}`))
	assert.NoError(t, err)
}
