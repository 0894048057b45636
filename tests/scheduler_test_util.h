// Driving a Scheduler to the end in tests, the invariants checked after
// every step.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "engine/scheduling/scheduler.h"

namespace kvtier::test_util {

// Submits every request, then steps until the scheduler has no work. Fails
// on a refused submission, a request error, a broken check_invariants()
// after any step, or no end after max_steps. ids gets the requests' ids in
// submission order.
inline ::testing::AssertionResult submit_and_run(Scheduler& s,
                                                 const std::vector<RequestParams>& reqs,
                                                 std::vector<RequestId>& ids,
                                                 int max_steps = 50000) {
  ids.clear();
  for (const RequestParams& p : reqs) {
    auto id = s.submit(p);
    if (!id) return ::testing::AssertionFailure() << "submit: " << id.error();
    ids.push_back(*id);
  }
  for (int step = 0; s.has_work(); ++step) {
    if (step == max_steps)
      return ::testing::AssertionFailure() << "no end after " << max_steps << " steps";
    for (const RequestEvent& e : s.step().events)
      if (!e.error.empty()) return ::testing::AssertionFailure() << e.error;
    if (auto ok = s.check_invariants(); !ok)
      return ::testing::AssertionFailure() << "step " << step << ": " << ok.error();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kvtier::test_util
