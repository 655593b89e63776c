//! The ACL bindings of the metadata image, indexed by resource pattern so that "which ACLs
//! cover topic T" reads only T's literal bucket, the `*` bucket and T's prefixes, never the
//! whole set.

use super::types::{AclBinding, AclBindingFilter, AclResourceType, PatternType, WILDCARD_RESOURCE};
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// Pattern name -> ids of the bindings with that name, for one (resource type, pattern type).
type Bucket = BTreeMap<String, BTreeSet<Uuid>>;

/// Every ACL binding by id, plus an index by (resource type, pattern type, pattern name).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclIndex {
    by_id: BTreeMap<Uuid, AclBinding>,
    by_pattern: BTreeMap<(AclResourceType, PatternType), Bucket>,
}

impl AclIndex {
    /// Number of bindings.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there is no binding at all.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// One binding by id.
    pub fn get(&self, id: &Uuid) -> Option<&AclBinding> {
        self.by_id.get(id)
    }

    /// Every binding with its id, by id.
    pub fn iter(&self) -> impl Iterator<Item = (&Uuid, &AclBinding)> {
        self.by_id.iter()
    }

    /// Whether an identical binding exists (under any id).
    pub fn contains(&self, acl: &AclBinding) -> bool {
        self.by_pattern
            .get(&(acl.resource_type, acl.pattern_type))
            .and_then(|bucket| bucket.get(&acl.resource_name))
            .is_some_and(|ids| ids.iter().any(|id| self.by_id.get(id) == Some(acl)))
    }

    /// Adds a binding; an id already in use is refused (the image stays unchanged).
    pub(crate) fn insert(&mut self, id: Uuid, acl: AclBinding) -> Result<(), String> {
        if self.by_id.contains_key(&id) {
            return Err(format!("ACL id {id} already exists"));
        }
        self.by_pattern
            .entry((acl.resource_type, acl.pattern_type))
            .or_default()
            .entry(acl.resource_name.clone())
            .or_default()
            .insert(id);
        self.by_id.insert(id, acl);
        Ok(())
    }

    /// Removes a binding by id.
    pub(crate) fn remove(&mut self, id: &Uuid) -> Option<AclBinding> {
        let acl = self.by_id.remove(id)?;
        let key = (acl.resource_type, acl.pattern_type);
        if let Some(bucket) = self.by_pattern.get_mut(&key) {
            if let Some(ids) = bucket.get_mut(&acl.resource_name) {
                ids.remove(id);
                if ids.is_empty() {
                    bucket.remove(&acl.resource_name);
                }
            }
            if bucket.is_empty() {
                self.by_pattern.remove(&key);
            }
        }
        Some(acl)
    }

    /// The bindings whose pattern covers the resource `name` of type `resource_type`: LITERAL
    /// ones named `name` or `*`, PREFIXED ones whose name starts `name`.
    pub fn covering(&self, resource_type: AclResourceType, name: &str) -> Vec<&AclBinding> {
        let mut ids: Vec<&Uuid> = Vec::new();
        if let Some(literal) = self.by_pattern.get(&(resource_type, PatternType::Literal)) {
            ids.extend(literal.get(name).into_iter().flatten());
            if name != WILDCARD_RESOURCE {
                ids.extend(literal.get(WILDCARD_RESOURCE).into_iter().flatten());
            }
        }
        if let Some(prefixed) = self.by_pattern.get(&(resource_type, PatternType::Prefixed)) {
            let prefix_ends = name
                .char_indices()
                .map(|(i, _)| i)
                .skip(1)
                .chain(std::iter::once(name.len()));
            for end in prefix_ends {
                ids.extend(prefixed.get(&name[..end]).into_iter().flatten());
            }
        }
        ids.into_iter()
            .filter_map(|id| self.by_id.get(id))
            .collect()
    }

    /// The bindings that pass `filter`, with their ids, by id.
    pub fn filtered<'a>(
        &'a self,
        filter: &'a AclBindingFilter,
    ) -> impl Iterator<Item = (&'a Uuid, &'a AclBinding)> + 'a {
        self.by_id.iter().filter(|(_, acl)| filter.matches(acl))
    }
}

#[cfg(test)]
mod tests {
    use super::super::types::{AclOperation, AclPermissionType};
    use super::*;

    fn acl(pattern_type: PatternType, name: &str) -> AclBinding {
        AclBinding {
            resource_type: AclResourceType::Topic,
            resource_name: name.into(),
            pattern_type,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission_type: AclPermissionType::Allow,
        }
    }

    #[test]
    fn covering_reads_literal_wildcard_and_prefixes() {
        let mut index = AclIndex::default();
        let cases = [
            (PatternType::Literal, "orders"),
            (PatternType::Literal, "*"),
            (PatternType::Literal, "ord"),
            (PatternType::Prefixed, "ord"),
            (PatternType::Prefixed, "orders"),
            (PatternType::Prefixed, "orders-eu"),
            (PatternType::Prefixed, "x"),
        ];
        for (i, (p, n)) in cases.iter().enumerate() {
            index
                .insert(Uuid::from_u128(i as u128 + 2), acl(*p, n))
                .unwrap();
        }
        let mut names: Vec<String> = index
            .covering(AclResourceType::Topic, "orders")
            .into_iter()
            .map(|a| format!("{}:{}", a.pattern_type, a.resource_name))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "LITERAL:*",
                "LITERAL:orders",
                "PREFIXED:ord",
                "PREFIXED:orders"
            ]
        );
        assert!(index.covering(AclResourceType::Group, "orders").is_empty());
        // A multi-byte name is cut only at character boundaries.
        assert_eq!(index.covering(AclResourceType::Topic, "ordé").len(), 2);
    }

    #[test]
    fn insert_refuses_a_used_id_and_remove_cleans_the_index() {
        let mut index = AclIndex::default();
        let id = Uuid::from_u128(7);
        index.insert(id, acl(PatternType::Literal, "t")).unwrap();
        assert!(index.insert(id, acl(PatternType::Literal, "u")).is_err());
        assert!(index.contains(&acl(PatternType::Literal, "t")));
        assert_eq!(index.remove(&id), Some(acl(PatternType::Literal, "t")));
        assert!(index.is_empty());
        assert_eq!(index, AclIndex::default(), "no empty buckets left behind");
    }
}
