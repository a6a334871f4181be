module github.com/tetherjobs/tether/pkg/api

go 1.22
