package member

// RecordLimitOnly makes every fetch of the members started after it
// record_limit (BenchmarkMemberAcquireMode's baseline).
func RecordLimitOnly(on bool) { recordLimitOnly = on }
