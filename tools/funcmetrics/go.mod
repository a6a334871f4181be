module github.com/tetherjobs/tether/tools/funcmetrics

go 1.22
