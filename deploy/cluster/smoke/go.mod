module smoke

go 1.24
