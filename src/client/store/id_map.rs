//! A map from ids to values, kept as one `Vec` sorted by id (iteration in id order, as with
//! `BTreeMap`). Why not `BTreeMap`: every key/value pair type compiled its own B-tree code
//! into the wasm, ~25 KB for the five maps and sets the browser keeps (B7,
//! docs/decisions/0013-browser-bundle-size.md); a sorted `Vec` costs a binary search and a
//! move. The browser's maps hold what one page shows plus what was pushed since, so the moves
//! stay small; snapshots are built in one sort ([`IdMap::from_pairs`]), not by repeated inserts.

use std::ops::Index;

#[derive(Clone, Debug, PartialEq)]
pub struct IdMap<V>(Vec<(String, V)>);

/// A set of ids.
pub type IdSet = IdMap<()>;

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> IdMap<V> {
    fn find(&self, id: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(id))
    }

    /// From pairs in any order; an id given more than once keeps `merge(earlier, later)`.
    pub fn from_pairs(mut pairs: Vec<(String, V)>, mut merge: impl FnMut(V, V) -> V) -> Self {
        // Stable: the pairs of one id stay in the order they were given.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, V)> = Vec::with_capacity(pairs.len());
        for (id, v) in pairs {
            match out.pop() {
                Some((last, held)) if last == id => out.push((last, merge(held, v))),
                Some(other) => {
                    out.push(other);
                    out.push((id, v));
                }
                None => out.push((id, v)),
            }
        }
        Self(out)
    }

    pub fn get(&self, id: &str) -> Option<&V> {
        self.find(id).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut V> {
        self.find(id).ok().map(|i| &mut self.0[i].1)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.find(id).is_ok()
    }

    /// Sets the value of `id`; the value it replaced, if any.
    pub fn insert(&mut self, id: String, v: V) -> Option<V> {
        match self.find(&id) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, v)),
            Err(i) => {
                self.0.insert(i, (id, v));
                None
            }
        }
    }

    pub fn remove(&mut self, id: &str) -> Option<V> {
        self.find(id).ok().map(|i| self.0.remove(i).1)
    }

    /// The value of `id`, inserted by `make` when absent.
    pub fn get_or_insert_with(&mut self, id: &str, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(id) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (id.to_string(), make()));
                i
            }
        };
        &mut self.0[i].1
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn into_values(self) -> impl Iterator<Item = V> {
        self.0.into_iter().map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IdSet {
    /// Adds `id`; whether it was new.
    pub fn add(&mut self, id: String) -> bool {
        self.insert(id, ()).is_none()
    }
}

impl<V> Index<&str> for IdMap<V> {
    type Output = V;

    fn index(&self, id: &str) -> &V {
        self.get(id).expect("no value for this id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_id_and_listed_in_id_order() {
        let mut m = IdMap::default();
        assert_eq!(m.insert("b".into(), 2), None);
        assert_eq!(m.insert("a".into(), 1), None);
        assert_eq!(m.insert("c".into(), 3), None);
        assert_eq!(m.insert("b".into(), 20), Some(2));
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [("a", &1), ("b", &20), ("c", &3)]
        );
        assert_eq!(m["b"], 20);
        assert!(m.contains("c") && !m.contains("d"));
        *m.get_mut("a").unwrap() += 10;
        assert_eq!(m.get("a"), Some(&11));
        assert_eq!(m.remove("a"), Some(11));
        assert_eq!(m.remove("a"), None);
        assert_eq!(m.len(), 2);
        *m.get_or_insert_with("d", || 0) += 4;
        *m.get_or_insert_with("d", || 0) += 4;
        assert_eq!(m.into_values().collect::<Vec<_>>(), [20, 3, 8]);
    }

    #[test]
    fn pairs_given_twice_are_merged_in_the_order_given() {
        let m = IdMap::from_pairs(
            vec![
                ("b".into(), "b1".to_string()),
                ("a".into(), "a1".into()),
                ("b".into(), "b2".into()),
                ("b".into(), "b3".into()),
            ],
            |held, later| format!("{held}+{later}"),
        );
        assert_eq!(m.values().collect::<Vec<_>>(), ["a1", "b1+b2+b3"]);
    }

    #[test]
    fn a_set_says_whether_an_id_was_new() {
        let mut s = IdSet::default();
        assert!(s.add("x".into()));
        assert!(!s.add("x".into()));
        assert!(s.contains("x") && s.len() == 1 && !s.is_empty());
    }
}
