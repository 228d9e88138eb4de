"""What strata writes to disk and reads back: stage directories with their manifests
(`stage`), the one atomic directory writer every output directory goes through
(`directory`), a user's single output file (`files`), and the generated Python modules a
target writes (`modules`)."""
