//! Range-checked integer keys of a config section: each key gets a serde
//! `deserialize_with` function, so an out-of-range value is one line
//! naming the section and key, reported at its position in the file.

/// `ranged_keys! { "section"; fn_name: "key" in LO..=HI, ... }`
macro_rules! ranged_keys {
    ($section:literal; $($name:ident: $key:literal in $lo:literal ..= $hi:literal),* $(,)?) => {$(
        fn $name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
            let v = <u64 as serde::Deserialize>::deserialize(d)?;
            if ($lo..=$hi).contains(&v) {
                Ok(v)
            } else {
                Err(<D::Error as serde::de::Error>::custom(format!(
                    concat!("[", $section, "] ", $key, " must be in {}..={}, got {}"),
                    $lo, $hi, v
                )))
            }
        }
    )*};
}

pub(crate) use ranged_keys;
