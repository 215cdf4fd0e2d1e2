"""What the notebooks' cells call, so that they hold prose and calls: tables and plots (show), the learner's code
shown from disk (yourcode), predictions beside measurements (predictions), notebook 03's wrap demo (wrapdemo). The
learner's run uses it; the grader reads the wrap demo's files."""
