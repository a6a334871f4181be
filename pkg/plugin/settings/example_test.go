package settings_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tetherjobs/tether/pkg/plugin/settings"
)

// Example shows a plugin's settings. The plugin config gives defaults, the
// job's context overrides them, labels are merged label by label.
func Example() {
	dec := settings.Decoder{Prefix: "myplugin: "}
	keys := []string{"image", "labels", "timeout"}

	decode := func(config, context string) error {
		cfg, err := dec.Object("config", json.RawMessage(config), keys)
		if err != nil {
			return err
		}
		ctx, err := dec.Object("context", json.RawMessage(context), keys)
		if err != nil {
			return err
		}
		merged, err := dec.Merge(cfg, ctx, "labels")
		if err != nil {
			return err
		}
		var (
			image   string
			labels  map[string]string
			timeout = time.Hour
		)
		for _, key := range merged.Keys() {
			v, _ := merged.Get(key)
			switch key {
			case "image":
				image, err = dec.String(key, v)
			case "labels":
				labels, err = dec.StringMap(key, v)
			case "timeout":
				timeout, err = dec.Duration(key, v, true)
			}
			if err != nil {
				return err
			}
		}
		fmt.Println(image, labels, timeout)
		return nil
	}

	config := `{"image": "app:1", "labels": {"team": "data", "env": "prod"}}`
	fmt.Println(decode(config, `{"labels": {"env": "dev"}, "timeout": "0"}`))
	fmt.Println(decode(config, `{"image": null}`))
	fmt.Println(decode(config, `{"timout": "1m"}`))
	fmt.Println(decode(config, `{"timeout": 60}`))
	// Output:
	// app:1 map[env:dev team:data] 0s
	// <nil>
	//  map[env:prod team:data] 1h0m0s
	// <nil>
	// myplugin: context: unknown key "timout"; known keys are image, labels, timeout
	// myplugin: timeout: must be a duration string like "30s", got 60
}
