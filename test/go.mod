module github.com/pulselb/pulselb/test

go 1.26.0

require github.com/pulselb/pulselb v0.0.0

replace github.com/pulselb/pulselb => ../
