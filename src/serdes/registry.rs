//! Default serdes by type: the typed form of Kafka's `default.key.serde`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use super::{
    BytesSerde, F64Serde, I32Serde, I64Serde, OptionSerde, Serde, SharedSerde, StringSerde,
    UnitSerde,
};

/// Serdes to use, per Rust type, where a DSL call is given none.
///
/// [`SerdeRegistry::standard`] knows `String`, `Vec<u8>`, `i32`, `i64`, `f64`
/// and `()`, and for each registered `T` also `Option<T>` (null = `None`).
///
/// ```
/// use weir::serdes::{JsonSerde, SerdeRegistry};
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Event { id: u64 }
/// let mut serdes = SerdeRegistry::standard();
/// serdes.register::<Event>(JsonSerde::new());
/// assert!(serdes.get::<Event>().is_some());
/// assert!(serdes.get::<Option<Event>>().is_some());
/// assert!(serdes.get::<u16>().is_none());
/// ```
#[derive(Clone, Default)]
pub struct SerdeRegistry {
    by_type: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl SerdeRegistry {
    /// An empty registry.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in serdes (see the type docs).
    pub fn standard() -> Self {
        let mut r = Self::empty();
        r.register::<String>(StringSerde);
        r.register::<Vec<u8>>(BytesSerde);
        r.register::<i32>(I32Serde);
        r.register::<i64>(I64Serde);
        r.register::<f64>(F64Serde);
        r.register::<()>(UnitSerde);
        r
    }

    /// Makes `serde` the default for `T` (and wraps it for `Option<T>`),
    /// replacing an earlier registration.
    pub fn register<T: 'static>(&mut self, serde: impl Serde<T>) -> &mut Self {
        let shared: SharedSerde<T> = Arc::new(serde);
        let optional: SharedSerde<Option<T>> = Arc::new(OptionSerde::from_shared(shared.clone()));
        self.by_type.insert(TypeId::of::<T>(), Arc::new(shared));
        self.by_type
            .insert(TypeId::of::<Option<T>>(), Arc::new(optional));
        self
    }

    /// The default serde for `T`, if one is registered.
    pub fn get<T: 'static>(&self) -> Option<SharedSerde<T>> {
        self.by_type
            .get(&TypeId::of::<T>())
            .and_then(|any| any.downcast_ref::<SharedSerde<T>>())
            .cloned()
    }
}

impl std::fmt::Debug for SerdeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerdeRegistry")
            .field("types", &self.by_type.len())
            .finish()
    }
}
