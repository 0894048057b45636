// Byte-pair merging of one piece, the loop both byte-level BPE tokenizers
// share (bpe_tokenizer.h: GPT-2's merge list; tiktoken_tokenizer.h: ranks).
// They differ only in what joining two adjacent parts gives, which the
// caller says:
//
//   value(byte)          the id a part of one byte starts as;
//   join(pair)           for two adjacent parts (PartView), the rank of
//                        joining them and the id the joined part gets, or
//                        nullopt when they never join.
//
// The lowest rank joins first, the leftmost of equals first, until no
// adjacent pair joins; the parts' ids are then the piece's.
//
// How: the parts form a linked list over the piece's bytes; a part keeps its
// slot when it absorbs its right neighbour, whose slot dies. A heap ordered
// by (rank, slot) pops what the reference loops (GPT-2's "merge the best pair
// everywhere, then look again", tiktoken's scan for the lowest rank) apply,
// because joining two parts changes only the two pairs beside them, which
// are pushed anew. Entries gone stale are skipped when popped, told by the
// ends of the parts they were made from: a part's end moves whenever it
// absorbs its neighbour.
#pragma once

#include <optional>
#include <queue>
#include <string_view>
#include <vector>

namespace kvtier {

// Two adjacent parts that might join: piece[begin, end) between them, and
// each one's id.
struct PartView {
  std::string_view piece;
  int begin, end;
  int left_id, right_id;
  std::string_view bytes() const { return piece.substr(begin, end - begin); }
};

struct PartJoin {
  int rank;
  int id;
};

template <class Value, class Join>
void bpe_merge(std::string_view piece, const Value& value, const Join& join,
               std::vector<int>& out) {
  struct Part {
    int begin, end;  // piece[begin, end); end -1 once absorbed
    int id;
    int prev, next;  // -1 at the ends
  };
  const int n = static_cast<int>(piece.size());
  std::vector<Part> parts(n);
  for (int i = 0; i < n; ++i)
    parts[i] = {i, i + 1, value(static_cast<unsigned char>(piece[i])), i - 1,
                i + 1 < n ? i + 1 : -1};

  struct Candidate {
    int rank;
    int left;  // slot of the left part; its begin, so leftmost means smallest
    int left_end, right_end;
    int id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int left) {
    if (left < 0 || parts[left].next < 0) return;
    const Part& l = parts[left];
    const Part& r = parts[l.next];
    const std::optional<PartJoin> j = join(PartView{piece, l.begin, r.end, l.id, r.id});
    if (j) queue.push({j->rank, left, l.end, r.end, j->id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Part& left = parts[c.left];
    if (left.end != c.left_end || left.next < 0 || parts[left.next].end != c.right_end) continue;
    Part& right = parts[left.next];
    left.end = right.end;
    left.id = c.id;
    left.next = right.next;
    if (right.next >= 0) parts[right.next].prev = c.left;
    right.end = -1;
    consider(left.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0 && i < n; i = parts[i].next) out.push_back(parts[i].id);
}

}  // namespace kvtier
