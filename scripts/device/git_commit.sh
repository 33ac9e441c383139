# Sourced by the device scripts: the commit every row's git_commit column names (the installed
# package has no .git beside it), unless the caller set ROOFLINT_GIT_COMMIT. "-dirty" where the tree
# differs from HEAD: a lent machine's copy can carry a stale .git.
export ROOFLINT_GIT_COMMIT=${ROOFLINT_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(
  git rev-parse -q HEAD >/dev/null 2>&1 && ! git diff --quiet HEAD 2>/dev/null && echo -dirty)}
