"""The lab's records and what reads them: the run-folder contract (runs), manifest.json (manifest), a deeper
measurement's NAME.json (results_file), the verdict over repeats, sittings; the report and the checker's stop
conditions (report, stop_conditions, paragraph). The learner's run, the grader, the teacher's modules and measure/ use it."""
